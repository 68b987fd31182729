// LoadEngine: a model path and settings turned into a running engine and what serving it needs
// (the Engine, its tokenizer and chat template, the snapshot context with the model's
// fingerprint, and notes on the plan, the backend and the chat template). Engine-internal:
// LoadEngineHost (engine_host.cc) builds the session host over it, and the daemon sees only
// engine/api/engine_host.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/api/engine_host.h"
#include "engine/core/engine.h"
#include "engine/core/session_persister.h"
#include "engine/sampling/stop_string_matcher.h"
#include "engine/snapshot/snapshot_format.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/session_id.h"
#include "engine/util/status.h"

namespace streamd {

// Limits of Generate.stop the engine enforces (reported in Opened.limits).
inline constexpr size_t kMaxStopStrings = StopStringMatcher::kMaxStops;
inline constexpr size_t kMaxStopBytes = StopStringMatcher::kMaxStopBytes;

// The backend a setup asks for: the facade's own enum (engine/api/engine_host.h), not a copy.
using api::BackendChoice;

struct EngineSetup {
  std::string model_path;
  // A build plan for this model and machine (`streamd build`, docs/BUILD.md), or empty: the
  // defaults, or kPlanBesideModel: the plan beside the model when it is current, else the
  // defaults (plan_note or plan_warning says which and why). Only the CPU backend runs plans:
  // with backend cuda a plan named by path is an error; with auto picking cuda, or
  // kPlanBesideModel, it is ignored and the model loads without it (plan_note says so).
  std::string plan_path;
  BackendChoice backend = BackendChoice::kAuto;
  // Without a plan, on the CPU backend: 8, K-quant files' matrices take 8-bit activations where
  // that kernel is fast (engine/backends/cpu/k_quant_defaults.h); 12, the 12-bit products.
  int k_quant_activation_bits = 8;
  EngineConfig engine;
  std::string streamd_version;  // stamped into snapshots
};

struct LoadedEngine {
  std::unique_ptr<Engine> engine;
  std::unique_ptr<tokenizer::ChatTemplate> chat;
  // What snapshots of this engine are stamped with and checked against.
  SnapshotContext snapshot_context;
  std::string plan_note;        // the plan in use (for the log), or empty
  std::string plan_warning;     // model.plan auto found a plan it could not use (a warning)
  std::string backend_note;     // why auto picked what it picked (for the log), or empty
  std::string chat_warning;     // a chat-template fallback (for the log), or empty
  std::string fault_injection;  // STREAMD_INJECT_BACKEND_FAULT in effect (a warning), or empty
};

// model.plan's value that asks for the plan beside the model.
inline constexpr std::string_view kPlanBesideModel = "auto";
// (PlanBesideModel, engine/build_plan/plan_file.h.)

// Loads the GGUF (validated), its tokenizer and chat template, picks the backend (auto: CUDA
// when this build has it and a GPU is visible), computes the model fingerprint and creates the
// engine. Errors name the file, the field or the device, and the numbers.
StatusOr<LoadedEngine> LoadEngine(const EngineSetup& setup);

}  // namespace streamd
