// DeepSeek-V4 and V4.1 chat encoding, following the semantics of DeepSeek's reference encoders
// (encoding_dsv4.py / encoding_dsv41.py): tool messages merged into user turns as <tool_result>
// blocks in call order, earlier reasoning dropped, tools and response format rendered into the
// leading system/developer message, DSML tool calls, thinking transitions and reasoning effort.
#include "common/error.h"
#include "encoding/encoder_internal.h"
#include "encoding/python_json.h"
#include "encoding/special_tokens.h"

#include <algorithm>
#include <charconv>
#include <map>

namespace deepinfer::encoding::detail {

namespace {

constexpr std::string_view kEffortMaxV4 =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is "
    "left unchecked.\n\n";

constexpr std::string_view kResponseFormatIntro =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// One piece of a merged user turn: user text or a tool result.
struct Block {
  bool tool_result = false;
  std::string text = {};
  std::string tool_use_id = {};
  std::vector<Json> images = {};  // behind the image placeholders in `text` (V4.1)
};

// A message after tool messages are merged into user turns (the reference's "content_blocks").
struct Turn {
  std::string role;
  std::string content;       // system, developer, assistant, latest_reminder
  std::vector<Json> images;  // behind the placeholders in `content`
  std::vector<Block> blocks;  // user turns
  std::optional<std::string> reasoning;
  std::optional<std::string> task;
  std::vector<ToolCall> calls;
  std::vector<Json> call_arguments;  // parsed calls[i].arguments
  bool sections = false;  // render the request's tools / response format here
  bool wo_eos = false;
};

struct Context {
  const EncodeOptions& options;
  bool v41;
  const DsmlTags& tags;
  bool thinking = true;
  std::string effort_prompt = {};  // written before the first message in thinking mode
  bool drop = true;           // effective drop_thinking
  bool render_response_format = false;
};

void resolve_effort(Context& ctx) {
  const auto& effort = ctx.options.reasoning_effort;
  ctx.thinking = ctx.options.thinking;
  if (effort && *effort == "none") ctx.thinking = false;
  if (!ctx.v41) {
    static constexpr std::string_view kPlain[] = {"none", "minimal", "low", "medium", "high",
                                                  "xhigh"};
    const bool plain = !effort || std::find(std::begin(kPlain), std::end(kPlain), *effort) !=
                                      std::end(kPlain);
    DI_CHECK(plain || *effort == "max", "reasoning_effort: unsupported value \"{}\" for "
             "deepseek_v4 (expected none, minimal, low, medium, high, xhigh or max)", *effort);
    if (ctx.thinking && effort && *effort == "max") ctx.effort_prompt = kEffortMaxV4;
    return;
  }
  int budget = 50;  // the V4.1 reference default, "high"
  if (effort && *effort != "none") {
    static const std::map<std::string, int, std::less<>> kNamed = {
        {"minimal", 25}, {"low", 25}, {"medium", 50}, {"high", 50}, {"xhigh", 75}, {"max", 100}};
    if (const auto it = kNamed.find(*effort); it != kNamed.end()) {
      budget = it->second;
    } else {
      const char* end = effort->data() + effort->size();
      const auto [ptr, ec] = std::from_chars(effort->data(), end, budget);
      DI_CHECK(ec == std::errc() && ptr == end && budget >= 1 && budget <= 100,
               "reasoning_effort: unsupported value \"{}\" for deepseek_v41 (expected an integer "
               "1..100, none, minimal, low, medium, high, xhigh or max)", *effort);
    }
  }
  if (ctx.thinking) {
    ctx.effort_prompt = fmt::format(
        "Reasoning Effort: {} (range 1-100, the higher the value, the more thorough the "
        "reasoning)\n\n", budget);
  }
}

void reject_image_token(const std::optional<std::string>& text, std::string_view where,
                        std::string_view field) {
  DI_CHECK(!text || text->find(tokens::kImage) == std::string::npos,
           "{}.{}: contains the image token {}; send images as image content parts", where,
           field, tokens::kImage);
}

// A tool message's content as the text of its <tool_result> block.
std::string tool_result_text(const Message& m, const Context& ctx, std::vector<Json>& images,
                             std::string_view where) {
  if (m.content) return *m.content;
  if (!m.content_parts) return {};
  // V4 writes "[Unsupported <type>]" for non-text parts; V4.1 turns images into placeholders
  // and leaves other parts out (its tool content is the "\n\n"-joined text blocks).
  const FlattenOptions flat{.allow_images = ctx.v41,
                            .allow_unsupported = !ctx.v41,
                            .drop_unsupported = ctx.v41,
                            .image_text = tokens::kImage};
  return join(part_texts(*m.content_parts, flat, images, where), "\n\n");
}

std::vector<Block> user_blocks(const Message& m, const Context& ctx, std::string_view where) {
  if (m.content) return {Block{.text = *m.content}};
  std::vector<Block> blocks;
  // V4.1 renders every part as its own block ("[Unsupported <type>]" for unknown ones); the V4
  // reference takes text only.
  const FlattenOptions flat{.allow_images = ctx.v41,
                            .allow_unsupported = ctx.v41,
                            .image_text = tokens::kImage};
  std::vector<Json> images;
  const std::vector<std::string> texts = part_texts(*m.content_parts, flat, images, where);
  std::size_t next_image = 0;
  for (std::size_t k = 0; k < texts.size(); ++k) {  // one text per part
    Block block;
    block.text = texts[k];
    if (ctx.v41 && is_image_part((*m.content_parts)[k])) {
      block.images.push_back(std::move(images[next_image++]));
    }
    blocks.push_back(std::move(block));
  }
  return blocks;
}

void add_user(std::vector<Turn>& turns, std::vector<Block> blocks, std::optional<std::string> task,
              bool from_tool) {
  // Consecutive user/tool messages share one user turn, unless the open turn carries a task.
  if (!turns.empty() && turns.back().role == "user" && (from_tool || !turns.back().task)) {
    for (Block& block : blocks) turns.back().blocks.push_back(std::move(block));
    return;
  }
  Turn turn;
  turn.role = "user";
  turn.blocks = std::move(blocks);
  turn.task = std::move(task);
  turns.push_back(std::move(turn));
}

std::vector<Turn> build_turns(std::span<const Message> messages, const Context& ctx) {
  const FlattenOptions flat{.allow_images = ctx.v41, .image_text = tokens::kImage};
  std::vector<Turn> turns;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (ctx.v41) {
      reject_image_token(m.content, where, "content");
      reject_image_token(m.reasoning_content, where, "reasoning_content");
      for (const ContentPart& part : m.content_parts.value_or(std::vector<ContentPart>{})) {
        reject_image_token(part.text, where, "content");
      }
    }
    if (m.role == "tool") {
      Block block{.tool_result = true, .tool_use_id = m.tool_call_id.value_or("")};
      block.text = tool_result_text(m, ctx, block.images, where);
      add_user(turns, {std::move(block)}, std::nullopt, /*from_tool=*/true);
      continue;
    }
    if (m.role == "user") {
      add_user(turns, user_blocks(m, ctx, where), m.task, /*from_tool=*/false);
      continue;
    }
    Turn turn;
    turn.role = m.role;
    turn.content = content_text(m, flat, turn.images, where);
    DI_CHECK(m.role != "developer" || !turn.content.empty(),
             "{}.content: a developer message must not be empty", where);
    turn.reasoning = m.reasoning_content;
    turn.task = m.task;
    turn.calls = m.tool_calls;
    for (std::size_t j = 0; j < m.tool_calls.size(); ++j) {
      turn.call_arguments.push_back(parse_tool_arguments(m.tool_calls[j], i, j));
    }
    turns.push_back(std::move(turn));
  }
  return turns;
}

// Tool results of one user turn follow the order of the calls of the last assistant turn that
// made calls (results with unknown ids sort as if first, stably).
void sort_tool_results(std::vector<Turn>& turns) {
  std::map<std::string, std::size_t> order;
  for (Turn& turn : turns) {
    if (turn.role == "assistant" && !turn.calls.empty()) {
      order.clear();
      for (std::size_t j = 0; j < turn.calls.size(); ++j) {
        if (!turn.calls[j].id.empty()) order[turn.calls[j].id] = j;
      }
      continue;
    }
    if (turn.role != "user" || order.empty()) continue;
    std::vector<Block> results;
    for (const Block& block : turn.blocks) {
      if (block.tool_result) results.push_back(block);
    }
    if (results.size() < 2) continue;
    auto rank = [&](const Block& block) {
      const auto it = order.find(block.tool_use_id);
      return it == order.end() ? std::size_t{0} : it->second;
    };
    std::stable_sort(results.begin(), results.end(),
                     [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
    std::size_t next = 0;
    for (Block& block : turn.blocks) {
      if (block.tool_result) block = std::move(results[next++]);
    }
  }
}

// The index of the last user turn; the generation header and kept reasoning hinge on it. V4.1
// counts a system message after the first position as a user turn.
int last_user_index(const std::vector<Turn>& turns, bool v41) {
  for (int i = static_cast<int>(turns.size()) - 1; i >= 0; --i) {
    const std::string& role = turns[static_cast<std::size_t>(i)].role;
    if (role == "user" || role == "developer" || (v41 && role == "system" && i > 0)) return i;
  }
  return -1;
}

// Before the last user turn: assistant reasoning is removed and developer turns are dropped.
std::vector<Turn> drop_thinking(std::vector<Turn> turns, bool v41) {
  const int last_user = last_user_index(turns, v41);
  std::vector<Turn> kept;
  for (std::size_t i = 0; i < turns.size(); ++i) {
    Turn& turn = turns[i];
    const bool keep = turn.role == "user" || turn.role == "system" ||
                      turn.role == "latest_reminder" || static_cast<int>(i) >= last_user;
    if (!keep && turn.role != "assistant") continue;
    if (!keep) turn.reasoning.reset();
    kept.push_back(std::move(turn));
  }
  return kept;
}

std::string render_tools(const Context& ctx) {
  std::vector<std::string> schemas;
  for (const Json& tool : ctx.options.tools) schemas.push_back(python_json_dumps(tool["function"]));
  const DsmlTags& t = ctx.tags;
  return fmt::format(
      "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
      "invoke tools by writing a \"{bo}\" block like the following:\n\n{bo}\n{io} "
      "name=\"$TOOL_NAME\">\n{po} name=\"$PARAMETER_NAME\" string=\"true|false\">"
      "$PARAMETER_VALUE{pc}\n...\n{ic}\n{io} name=\"$TOOL_NAME2\">\n...\n{ic}\n{bc}\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other types "
      "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by {ts}), you MUST output "
      "your complete reasoning inside {ts}...{te} BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after {te} with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n{schemas}\n\nYou MUST strictly follow the above defined tool "
      "name and parameter schemas to invoke tool calls.\n",
      fmt::arg("bo", t.block_open), fmt::arg("bc", t.block_close), fmt::arg("io", t.invoke_open),
      fmt::arg("ic", t.invoke_close), fmt::arg("po", t.param_open), fmt::arg("pc", t.param_close),
      fmt::arg("ts", tokens::kThinkStart), fmt::arg("te", tokens::kThinkEnd),
      fmt::arg("schemas", join(schemas, "\n")));
}

// The tools and response-format sections a system/developer turn carries.
std::string render_sections(const Turn& turn, const Context& ctx) {
  if (!turn.sections) return {};
  std::string out;
  if (!ctx.options.tools.empty()) out += "\n\n" + render_tools(ctx);
  if (ctx.render_response_format) {
    out += "\n\n";
    out += kResponseFormatIntro;
    out += python_json_dumps(*ctx.options.response_format);
  }
  return out;
}

std::string render_tool_calls(const Turn& turn, const Context& ctx) {
  if (turn.calls.empty()) return {};
  const DsmlTags& t = ctx.tags;
  std::vector<std::string> invokes;
  for (std::size_t j = 0; j < turn.calls.size(); ++j) {
    std::vector<std::string> params;
    for (const auto& [key, value] : turn.call_arguments[j].items()) {
      const bool is_string = value.is_string();
      params.push_back(fmt::format("{} name=\"{}\" string=\"{}\">{}{}", t.param_open, key,
                                   is_string ? "true" : "false",
                                   is_string ? value.get<std::string>() : python_json_dumps(value),
                                   t.param_close));
    }
    invokes.push_back(fmt::format("{} name=\"{}\">\n{}\n{}", t.invoke_open, turn.calls[j].name,
                                  join(params, "\n"), t.invoke_close));
  }
  return fmt::format("\n\n{}\n{}\n{}", t.block_open, join(invokes, "\n"), t.block_close);
}

void render_body(std::size_t i, const std::vector<Turn>& turns, const Context& ctx, int last_user,
                 EncodeResult& out) {
  const Turn& turn = turns[i];
  std::string& p = out.prompt;
  const auto add_images = [&](const std::vector<Json>& images) {
    out.images.insert(out.images.end(), images.begin(), images.end());
  };
  if (turn.role == "system") {
    if (ctx.v41 && i > 0) p += tokens::kSystem;
    p += turn.content;
    add_images(turn.images);
    p += render_sections(turn, ctx);
  } else if (turn.role == "developer") {
    p += tokens::kUser;
    p += turn.content;
    add_images(turn.images);
    p += render_sections(turn, ctx);
  } else if (turn.role == "user") {
    p += tokens::kUser;
    for (std::size_t k = 0; k < turn.blocks.size(); ++k) {
      const Block& block = turn.blocks[k];
      if (k > 0) p += "\n\n";
      if (block.tool_result) p += tokens::kToolResultOpen;
      p += block.text;
      if (block.tool_result) p += tokens::kToolResultClose;
      add_images(block.images);
    }
  } else if (turn.role == "latest_reminder") {
    p += tokens::kLatestReminder;
    p += turn.content;
    add_images(turn.images);
  } else {  // assistant
    const bool after_task = i > 0 && turns[i - 1].task.has_value();
    if (ctx.thinking && !after_task && (!ctx.drop || static_cast<int>(i) > last_user)) {
      p += turn.reasoning.value_or("");
      p += tokens::kThinkEnd;
    }
    p += turn.content;
    add_images(turn.images);
    p += render_tool_calls(turn, ctx);
    if (!turn.wo_eos) p += tokens::kEos;
  }
}

// What follows a turn when the next one is an assistant turn, a reminder, or nothing: the task
// token, or the assistant header with the thinking switch.
void render_transition(std::size_t i, const std::vector<Turn>& turns, const Context& ctx,
                       int last_user, std::string& p) {
  const bool last = i + 1 == turns.size();
  if (!last && turns[i + 1].role != "assistant" && turns[i + 1].role != "latest_reminder") return;
  const Turn& turn = turns[i];
  if (turn.task) {
    const std::string_view token = tokens::task_token(*turn.task);
    if (*turn.task == "action") {
      p += tokens::kAssistant;
      p += ctx.thinking ? tokens::kThinkStart : tokens::kThinkEnd;
    }
    p += token;
    return;
  }
  const bool user_like = turn.role == "user" || turn.role == "developer" ||
                         (ctx.v41 && turn.role == "system" && i > 0);
  if (!user_like || (last && !ctx.options.add_generation_prompt)) return;
  p += tokens::kAssistant;
  const bool open = ctx.thinking && (!ctx.drop || static_cast<int>(i) >= last_user);
  p += open ? tokens::kThinkStart : tokens::kThinkEnd;
}

// Request-level tools and response format go to a leading system/developer message, or to a
// system message put in front (what vLLM's V4 wrapper does to match the reference goldens).
void attach_sections(std::vector<Turn>& turns, Context& ctx) {
  const auto& format = ctx.options.response_format;
  ctx.render_response_format = format && (*format)["type"] != "text";
  if (ctx.options.tools.empty() && !ctx.render_response_format) return;
  if (turns.empty() || (turns[0].role != "system" && turns[0].role != "developer")) {
    Turn system;
    system.role = "system";
    turns.insert(turns.begin(), std::move(system));
  }
  turns[0].sections = true;
}

}  // namespace

EncodeResult encode_dsv4(std::span<const Message> messages, const EncodeOptions& options) {
  Context ctx{.options = options,
              .v41 = options.format == ChatFormat::kDeepSeekV41,
              .tags = dsml_tags(options.format)};
  resolve_effort(ctx);
  std::vector<Turn> turns = build_turns(messages, ctx);
  attach_sections(turns, ctx);
  if (options.continue_final_message) turns.back().wo_eos = true;
  sort_tool_results(turns);
  // Tool-loop reasoning must round-trip, so tools turn dropping off (reference rule).
  ctx.drop = options.drop_thinking && options.tools.empty();
  if (ctx.thinking && ctx.drop) turns = drop_thinking(std::move(turns), ctx.v41);

  EncodeResult out;
  if (options.add_bos) out.prompt += tokens::kBos;
  const int last_user = last_user_index(turns, ctx.v41);
  for (std::size_t i = 0; i < turns.size(); ++i) {
    if (i == 0) {
      if (ctx.v41 && (!ctx.effort_prompt.empty() || turns[0].role == "system")) {
        out.prompt += tokens::kSystem;
      }
      out.prompt += ctx.effort_prompt;
    }
    render_body(i, turns, ctx, last_user, out);
    render_transition(i, turns, ctx, last_user, out.prompt);
  }
  out.thinking_open = out.prompt.ends_with(tokens::kThinkStart);
  return out;
}

}  // namespace deepinfer::encoding::detail
