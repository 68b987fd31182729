// FaultInjectingBackend: a ModelBackend that runs another one until a set number of steps, then
// behaves like a device that broke (every Execute fails, Health() says why): how the tests show
// that a backend fault turns the daemon's health NOT_SERVING, on machines without a GPU to break.
//
// Enabled only by the environment (never by the config file an operator edits):
//   STREAMD_INJECT_BACKEND_FAULT=after_steps:N   the (N+1)-th Execute and all later ones fail
// LoadEngine wraps the backend when it is set and says so in its backend note (the log).
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "engine/model/model_backend.h"

namespace streamd {

inline constexpr const char* kInjectBackendFaultEnv = "STREAMD_INJECT_BACKEND_FAULT";

// N from "after_steps:N"; nullopt for an empty value; INVALID_ARGUMENT naming the variable for
// anything else.
StatusOr<std::optional<int64_t>> ParseInjectedFault(std::string_view value);

std::unique_ptr<ModelBackend> InjectFaultAfterSteps(std::unique_ptr<ModelBackend> inner,
                                                    int64_t steps);

}  // namespace streamd
