// Test helper: the ApiError a call throws, so tests can check its status, param and code.
#pragma once

#include <gtest/gtest.h>

#include "server/api_error.h"

namespace deepinfer::server::testing {

template <typename Fn>
ApiError error_of(Fn fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError thrown";
  return ApiError(0, "");
}

}  // namespace deepinfer::server::testing
