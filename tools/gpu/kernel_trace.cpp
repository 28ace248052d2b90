// LD_PRELOAD tool for the GPU machine: records the device start/end of every kernel, memcpy and
// memset a program runs (CUPTI activity API; no change to the program) and writes them as CSV to
// $KERNEL_TRACE_OUT at exit. tools/gpu/kernel_trace_report.py turns the tail of a trace (the timed
// decode steps of a bench) into kernels per step, GPU busy time and idle gaps. KERNEL_TRACE_API=1 also
// records the host's CUDA runtime calls (kind h: launches, copies, syncs, on the same clock), to see
// whether the device waited for the host; read_trace() leaves them out unless asked.
// build (device): g++ -O2 -shared -fPIC kernel_trace.cpp -I<cupti include> -L<lib> -l:libcupti.so.13
#include <cupti.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Record {
  std::uint64_t start, end;
  char kind;  // k = kernel, c = memcpy, s = memset, h = host runtime call
  std::string name;
};

std::mutex& records_mutex() {
  static std::mutex m;
  return m;
}

std::vector<Record>& records() {
  static auto* r = new std::vector<Record>();  // never destroyed: CUPTI may deliver during teardown
  return *r;
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *size = std::size_t{8} << 20;
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(records_mutex());
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      records().push_back({k->start, k->end, 'k', k->name != nullptr ? k->name : "?"});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      records().push_back({c->start, c->end, 'c', "memcpy" + std::to_string(c->copyKind)});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* s = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      records().push_back({s->start, s->end, 's', "memset"});
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const char* name = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS || name == nullptr)
        name = "runtime";
      records().push_back({a->start, a->end, 'h', name});
    }
  }
  std::free(buffer);
}

__attribute__((constructor)) void start_trace() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS)
    std::fprintf(stderr, "kernel_trace: CUPTI activity tracing could not be enabled\n");
  const char* api = std::getenv("KERNEL_TRACE_API");
  if (api != nullptr && api[0] == '1' && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS)
    std::fprintf(stderr, "kernel_trace: CUPTI runtime API tracing could not be enabled\n");
}

__attribute__((destructor)) void write_trace() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(records_mutex());
  if (records().empty()) return;  // a process without device work leaves no file
  const char* path = std::getenv("KERNEL_TRACE_OUT");
  std::FILE* f = std::fopen(path != nullptr ? path : "kernel_trace.csv", "w");
  if (f == nullptr) return;
  std::fprintf(f, "start_ns,end_ns,kind,name\n");
  for (const Record& r : records())
    std::fprintf(f, "%llu,%llu,%c,%.120s\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.kind, r.name.c_str());
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu records\n", records().size());
}

}  // namespace
