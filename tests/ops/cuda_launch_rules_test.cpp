// The CUDA backend's launch rule, checked on its sources (no GPU needed): every kernel is launched with
// launch_chained (a programmatic dependent of the kernel before it) and waits for its predecessor in
// its body — one kernel without the wait would let the kernels after it run before the kernels before
// it finish (dependent_launch.cuh, docs/CUDA.md §3).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string launch_rules_read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The source without // and /* */ comments (a comment may quote "<<<").
std::string launch_rules_strip_comments(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
      out += '\n';
    } else if (s.compare(i, 2, "/*") == 0) {
      const std::size_t end = s.find("*/", i + 2);
      i = end == std::string::npos ? s.size() : end + 1;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The body of the function whose opening '{' follows position `from`.
std::string launch_rules_body(const std::string& s, std::size_t from) {
  const std::size_t open = s.find('{', from);
  if (open == std::string::npos) return {};
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return s.substr(open, i - open + 1);
  }
  return s.substr(open);
}

std::vector<fs::path> launch_rules_sources() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(DEEPINFER_SOURCE_DIR) / "src" / "ops" / "cuda"))
    if (e.path().extension() == ".cu" || e.path().extension() == ".cuh") files.push_back(e.path());
  return files;
}

TEST(CudaLaunchRules, NoKernelIsLaunchedWithTripleChevrons) {
  const auto files = launch_rules_sources();
  ASSERT_GT(files.size(), 10u);
  for (const fs::path& f : files) {
    const std::string code = launch_rules_strip_comments(launch_rules_read(f));
    EXPECT_EQ(code.find("<<<"), std::string::npos)
        << f.filename() << " launches a kernel with <<<>>>: use launch_chained (dependent_launch.cuh)";
  }
}

TEST(CudaLaunchRules, EveryKernelWaitsForThePreviousKernel) {
  // Launched outside the chain (cudaLaunchKernelEx without the programmatic attribute): need no wait.
  const std::set<std::string> unchained = {"arch_probe_kernel", "sample_kernel"};
  const std::regex kernel(R"(__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\()");
  int kernels = 0;
  for (const fs::path& f : launch_rules_sources()) {
    const std::string code = launch_rules_strip_comments(launch_rules_read(f));
    for (std::sregex_iterator it(code.begin(), code.end(), kernel), end; it != end; ++it) {
      const std::string name = (*it)[1];
      ++kernels;
      if (unchained.count(name) != 0) continue;
      const std::string body = launch_rules_body(code, static_cast<std::size_t>(it->position() + it->length()));
      EXPECT_TRUE(body.find("enter_dependent_kernel()") != std::string::npos ||
                  body.find("grid_dependency_wait()") != std::string::npos)
          << f.filename() << ": kernel " << name << " never waits for the kernel before it";
    }
  }
  EXPECT_GT(kernels, 40);
}

}  // namespace
