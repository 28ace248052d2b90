// deepinfer._core: the pybind11 layer over deepinfer::LLM and engine::SamplingParams. The Python
// package (python/deepinfer) builds the vLLM-style LLM, outputs and progress bar on top of it.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "deepinfer/llm.h"

namespace py = pybind11;

namespace deepinfer::python {
namespace {

using nlohmann::json;

// A Python value as JSON, for SamplingParams::from_json: the engine's own parser then names any
// unknown field or wrong type. Integers beyond int64 go through as unsigned (seeds are u64).
json to_json(py::handle value, const std::string& where) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::int_>(value) || py::hasattr(value, "__index__")) {
    const auto i = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
    if (!i) throw py::error_already_set();
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
    if (overflow == 0) return static_cast<std::int64_t>(x);
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());
      if (PyErr_Occurred() == nullptr) return static_cast<std::uint64_t>(u);
      PyErr_Clear();
    }
    throw_error("{}: integer {} is out of range", where, py::repr(i).cast<std::string>());
  }
  if (py::hasattr(value, "__float__") && !py::isinstance<py::sequence>(value)) return value.cast<double>();
  if (py::isinstance<py::dict>(value)) {
    json object = json::object();
    for (auto [k, v] : value.cast<py::dict>()) object[py::str(k).cast<std::string>()] = to_json(v, where);
    return object;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    json array = json::array();
    for (py::handle v : value) array.push_back(to_json(v, where));
    return array;
  }
  throw_error("{}: cannot use a value of Python type {}", where,
              py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>());
}

py::object to_python(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return py::none();
    case json::value_t::boolean: return py::bool_(value.get<bool>());
    case json::value_t::number_integer: return py::int_(value.get<std::int64_t>());
    case json::value_t::number_unsigned: return py::int_(value.get<std::uint64_t>());
    case json::value_t::number_float: return py::float_(value.get<double>());
    case json::value_t::string: return py::str(value.get<std::string>());
    case json::value_t::array: {
      py::list out;
      for (const json& v : value) out.append(to_python(v));
      return out;
    }
    case json::value_t::object: {
      py::dict out;
      for (const auto& [k, v] : value.items()) out[py::str(k)] = to_python(v);
      return out;
    }
    default: return py::none();
  }
}

// SamplingParams(**fields): the engine's field names (vLLM's), checked now so a bad value fails
// where it is written. Token ids are checked against the model's vocabulary at generate().
engine::SamplingParams make_sampling_params(const py::kwargs& fields) {
  json object = json::object();
  for (auto [key, value] : fields) {
    const std::string name = py::str(key).cast<std::string>();
    object[name] = to_json(value, "sampling params: " + name);
  }
  engine::SamplingParams params = engine::SamplingParams::from_json(object);
  params.validate(std::numeric_limits<std::int32_t>::max());
  return params;
}

template <typename T>
T take(py::handle value, const std::string& name) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw_error("LLM: engine argument {} has the wrong type ({})", name,
                py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>());
  }
}

// LLM(model, **engine_args): the C++ LLMOptions under the same names (and vLLM's where they mean
// the same); anything else is an error rather than silently ignored.
LLMOptions make_options(const py::kwargs& args) {
  LLMOptions o;
  for (auto [key, value] : args) {
    const std::string name = py::str(key).cast<std::string>();
    if (value.is_none() && name != "mode" && name != "tokenizer") continue;
    if (name == "device") o.device = take<std::string>(value, name);
    else if (name == "mode") o.mode = value.is_none() ? std::nullopt : std::optional(take<std::string>(value, name));
    else if (name == "tokenizer") o.tokenizer = value.is_none() ? "" : take<std::string>(value, name);
    else if (name == "max_num_seqs") o.max_num_seqs = take<std::int32_t>(value, name);
    else if (name == "max_num_batched_tokens") o.max_num_batched_tokens = take<std::int32_t>(value, name);
    else if (name == "max_model_len") o.max_model_len = take<std::int32_t>(value, name);
    else if (name == "num_pages" || name == "num_cache_pages") o.num_pages = take<std::int32_t>(value, name);
    else if (name == "cache_memory_bytes") o.cache_memory_bytes = take<std::int64_t>(value, name);
    else if (name == "gpu_memory_utilization") o.gpu_memory_utilization = take<double>(value, name);
    else if (name == "load_format") o.load_format = take<std::string>(value, name);
    else if (name == "num_layers") o.num_layers = take<std::int32_t>(value, name);
    else if (name == "load_threads") o.load_threads = take<std::int32_t>(value, name);
    else if (name == "show_progress") o.show_progress = take<bool>(value, name);
    else if (name == "enable_prefix_caching") o.enable_prefix_caching = take<bool>(value, name);
    else if (name == "seed") o.seed = take<std::uint64_t>(value, name);
    else if (name == "worker_threads") o.worker_threads = take<std::int32_t>(value, name);
    else
      throw_error("LLM: unknown engine argument '{}' (known: device, mode, tokenizer, max_num_seqs, "
                  "max_num_batched_tokens, max_model_len, num_cache_pages, cache_memory_bytes, "
                  "gpu_memory_utilization, load_format, num_layers, load_threads, show_progress, "
                  "enable_prefix_caching, seed, worker_threads)",
                  name);
  }
  return o;
}

Prompt make_prompt(py::handle item, std::size_t index) {
  if (py::isinstance<py::str>(item)) return Prompt::from_text(item.cast<std::string>());
  DI_CHECK(py::isinstance<py::sequence>(item), "prompt {}: expected a string or a list of token ids, got {}", index,
           py::str(py::type::handle_of(item).attr("__name__")).cast<std::string>());
  std::vector<std::int32_t> ids;
  for (py::handle v : item) {
    const json id = to_json(v, fmt::format("prompt {}", index));
    DI_CHECK(id.is_number_integer(), "prompt {}: token ids must be integers, got {}", index, id.dump());
    const auto x = id.get<std::int64_t>();
    DI_CHECK(!id.is_number_unsigned() && x >= std::numeric_limits<std::int32_t>::min() &&
                 x <= std::numeric_limits<std::int32_t>::max(),
             "prompt {}: token id {} at index {} is outside the vocabulary", index, id.dump(), ids.size());
    ids.push_back(static_cast<std::int32_t>(x));
  }
  return Prompt::from_ids(std::move(ids));
}

py::object logprobs_to_python(const std::vector<engine::SampleResult>& samples) {
  py::list out;
  for (const engine::SampleResult& s : samples) {
    py::list top;
    for (const engine::TokenLogprob& t : s.top) top.append(py::make_tuple(t.token, t.logprob));
    out.append(py::make_tuple(s.token, s.logprob, s.rank, top));
  }
  return out;
}

py::dict result_to_python(const RequestResult& r, bool with_logprobs) {
  py::dict d;
  d["prompt"] = r.prompt ? py::object(py::str(*r.prompt)) : py::none();
  d["prompt_token_ids"] = py::cast(r.prompt_token_ids);
  py::list outputs;
  for (const CompletionResult& c : r.outputs) {
    py::dict o;
    o["index"] = c.index;
    o["text"] = c.text ? py::object(py::str(*c.text)) : py::none();
    o["token_ids"] = py::cast(c.token_ids);
    o["finish_reason"] = c.finish_reason;
    o["stop_reason"] = c.stop_reason ? py::object(py::str(*c.stop_reason)) : py::none();
    o["logprobs"] = with_logprobs ? logprobs_to_python(c.logprobs) : py::none();
    outputs.append(o);
  }
  d["outputs"] = outputs;
  return d;
}

// generate(prompts, params, progress): runs without the GIL; every engine step takes it back
// briefly to report progress and to let Ctrl-C (KeyboardInterrupt) stop the call, after which
// LLM::generate aborts what it queued, so the object stays usable.
py::list generate(LLM& llm, const py::sequence& prompts, const std::vector<engine::SamplingParams>& params,
                  const py::object& progress) {
  std::vector<Prompt> batch;
  batch.reserve(py::len(prompts));
  for (std::size_t i = 0; i < py::len(prompts); ++i) batch.push_back(make_prompt(prompts[i], i));
  const ProgressCallback on_step = [&progress](std::size_t done, std::size_t total) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!progress.is_none()) progress(done, total);
  };
  std::vector<RequestResult> results;
  {
    py::gil_scoped_release release;
    results = llm.generate(batch, params, on_step, /*throw_on_rejected=*/true);
  }
  py::list out;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const engine::SamplingParams& p = params.size() == 1 ? params[0] : params[i];
    out.append(result_to_python(results[i], p.logprobs.has_value()));
  }
  return out;
}

void bind_sampling_params(py::module_& m) {
  using SP = engine::SamplingParams;
  py::class_<SP>(m, "SamplingParams", "Per-request sampling parameters (vLLM's names; seed = seq_seed).")
      .def(py::init(&make_sampling_params))
      .def_readwrite("n", &SP::n)
      .def_readwrite("temperature", &SP::temperature)
      .def_readwrite("top_p", &SP::top_p)
      .def_readwrite("top_k", &SP::top_k)
      .def_readwrite("min_p", &SP::min_p)
      .def_readwrite("repetition_penalty", &SP::repetition_penalty)
      .def_readwrite("presence_penalty", &SP::presence_penalty)
      .def_readwrite("frequency_penalty", &SP::frequency_penalty)
      .def_readwrite("stop_token_ids", &SP::stop_token_ids)
      .def_readwrite("stop", &SP::stop)
      .def_readwrite("include_stop_str_in_output", &SP::include_stop_str_in_output)
      .def_readwrite("max_tokens", &SP::max_tokens)
      .def_readwrite("min_tokens", &SP::min_tokens)
      .def_readwrite("ignore_eos", &SP::ignore_eos)
      .def_readwrite("skip_special_tokens", &SP::skip_special_tokens)
      .def_readwrite("logprobs", &SP::logprobs)
      .def_readwrite("seq_seed", &SP::seq_seed)
      .def_property(
          "seed", [](const SP& p) { return p.seq_seed; },
          [](SP& p, std::optional<std::uint64_t> seed) { p.seq_seed = seed; })
      .def_property_readonly("logit_bias", [](const SP& p) { return to_python(p.to_json()["logit_bias"]); })
      .def_property_readonly("so_args", [](const SP& p) { return to_python(p.to_json()["so_args"]); })
      .def("to_dict", [](const SP& p) { return to_python(p.to_json()); })
      .def("__repr__", [](const SP& p) { return "SamplingParams(" + p.to_json().dump() + ")"; });
}

void bind_llm(py::module_& m) {
  py::class_<LLM>(m, "_LLM")
      .def(py::init([](const std::string& model, const py::kwargs& args) {
             const LLMOptions options = make_options(args);
             py::gil_scoped_release release;
             return std::make_unique<LLM>(model, options);
           }),
           py::arg("model"))
      .def("generate", &generate, py::arg("prompts"), py::arg("params"), py::arg("progress") = py::none())
      .def("encode", &LLM::encode, py::arg("text"))
      .def("decode", &LLM::decode, py::arg("token_ids"))
      .def_property_readonly("has_tokenizer", &LLM::has_tokenizer)
      .def_property_readonly("vocab_size", &LLM::vocab_size)
      .def_property_readonly("numeric_mode", &LLM::numeric_mode);
}

}  // namespace
}  // namespace deepinfer::python

PYBIND11_MODULE(_core, m) {
  m.doc() = "deepinfer's C++ engine (use the deepinfer package: LLM, SamplingParams)";
  // Every deepinfer::Error (bad input, bad files) arrives as DeepInferError, a ValueError.
  py::register_exception<deepinfer::Error>(m, "DeepInferError", PyExc_ValueError);
  deepinfer::python::bind_sampling_params(m);
  deepinfer::python::bind_llm(m);
  m.attr("__version__") = DEEPINFER_VERSION;
}
