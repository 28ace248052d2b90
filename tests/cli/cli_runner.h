// Runs the built `deepinfer` binary (path from DEEPINFER_CLI) and captures its exit status and
// output, for end-to-end tests of the subcommands.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace deepinfer::testing {

struct CliResult {
  int exit_code = -1;
  bool signaled = false;  // killed by a signal (a crash / abort): never acceptable
  std::string out;        // stdout
  std::string err;        // stderr
};

inline std::string shell_quote(const std::string& arg) {
  std::string out = "'";
  for (char ch : arg) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// Runs `deepinfer <args>`; `args` is a shell fragment (quote paths with shell_quote).
inline CliResult run_cli(const std::string& args, const std::string& stderr_file) {
  CliResult result;
  const std::string command = shell_quote(DEEPINFER_CLI) + " " + args + " 2>" + shell_quote(stderr_file);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.out.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.signaled = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) > 128);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* err = std::fopen(stderr_file.c_str(), "r")) {
    while ((n = std::fread(buffer.data(), 1, buffer.size(), err)) > 0) result.err.append(buffer.data(), n);
    std::fclose(err);
  }
  return result;
}

}  // namespace deepinfer::testing
