#include "engine/host/load_engine.h"

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "engine/backends/backend.h"
#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/model_check.h"
#include "engine/backends/fault_injection.h"
#include "engine/build_plan/plan_binding.h"
#include "engine/snapshot/model_fingerprint.h"

namespace streamd {
namespace {

// model.plan: auto. The plan beside the model (PlanBesideModel), when it is current for this
// model, streamd version and machine; else the built-in defaults, saying why. Unlike a plan
// named by path, a missing, damaged or foreign one never fails the start: `auto` is what a
// deployment sets before anyone has built a plan on the machine it lands on.
StatusOr<std::unique_ptr<LlamaModel>> LoadWithPlanBeside(const std::string& model_path,
                                                         std::string* plan_path, int k_quant_bits,
                                                         LoadedEngine& out) {
  const std::string beside = PlanBesideModel(model_path);
  std::error_code ec;
  if (!std::filesystem::exists(beside, ec)) {
    std::string k_quant_note;
    auto model = LoadCpuModel(model_path, "", &k_quant_note, nullptr, k_quant_bits);
    out.plan_note = "auto: no plan at " + beside +
                    "; the built-in defaults (streamd build --model " + model_path +
                    " makes one, timed on this machine)" +
                    (k_quant_note.empty() ? "" : "; " + k_quant_note);
    plan_path->clear();
    return model;
  }
  std::string rejected;
  auto model = LoadCpuModel(model_path, beside, &out.plan_note, &rejected, k_quant_bits);
  if (!model.ok() || rejected.empty()) {
    *plan_path = beside;
    if (model.ok()) out.plan_note = "auto: " + out.plan_note;
    return model;
  }
  out.plan_warning = "model.plan auto: " + beside +
                     " not used, the built-in defaults instead: " + rejected +
                     " (rebuild it: streamd build --model " + model_path + " --out " + beside + ")";
  plan_path->clear();
  return model;
}

}  // namespace

StatusOr<LoadedEngine> LoadEngine(const EngineSetup& setup) {
  LoadedEngine out;
  const BackendKind kind =
      ResolveBackend(setup.backend == BackendChoice::kCuda  ? BackendKind::kCuda
                     : setup.backend == BackendChoice::kCpu ? BackendKind::kCpu
                                                            : BackendKind::kAuto,
                     &out.backend_note);
  // The CUDA backend uploads the host model's converted rows: they must stay, so K-quant files
  // keep the 12-bit host products there (the GPU runs its own kernels anyway).
  const int k_quant_bits = kind == BackendKind::kCpu ? setup.k_quant_activation_bits : 12;
  std::string plan_path = setup.plan_path;
  // Only the CPU backend runs plans, and a model loaded under one may lack the converted rows the
  // GPU uploads (freed where the plan's 8-bit copies serve): decided before anything is loaded.
  if (kind != BackendKind::kCpu && !plan_path.empty()) {
    if (setup.backend == BackendChoice::kCuda && plan_path != kPlanBesideModel) {
      return FailedPreconditionError("model.plan: " + plan_path +
                                     " is a cpu plan, and engine.backend is cuda; set "
                                     "engine.backend: cpu to use it");
    }
    // auto picked the GPU, or the plan is only "the one beside the model, if any": the best
    // backend here wins over a plan for the other one.
    out.plan_note = "ignored: " + plan_path + " (cpu plans), engine.backend " +
                    (setup.backend == BackendChoice::kCuda ? "cuda" : "auto picked cuda") + " (" +
                    out.backend_note + ")";
    plan_path.clear();
  }
  auto model =
      plan_path == kPlanBesideModel
          ? LoadWithPlanBeside(setup.model_path, &plan_path, k_quant_bits, out)
          : LoadCpuModel(setup.model_path, plan_path, &out.plan_note, nullptr, k_quant_bits);
  if (!model.ok()) {
    // Every problem of the file at once (architecture, tensor types, tokenizer), not only the
    // first the loader met; a failure that is not the file's (a plan) stays as it was.
    if (Status found = CheckModelFile(setup.model_path); !found.ok()) return found;
    return model.status();
  }
  const LlamaConfig config = (*model)->config();
  SnapshotContext& ctx = out.snapshot_context;
  ctx.model_fingerprint = ModelFingerprint((*model)->file());
  ctx.model_name = config.name.empty() ? config.architecture : config.name;
  ctx.n_layers = config.n_layers;
  ctx.n_kv_heads = config.n_kv_heads;
  ctx.head_dim = config.head_dim;
  ctx.block_size = setup.engine.block_size;
  ctx.streamd_version = setup.streamd_version;
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  if (!vocab.ok()) {
    return Status(vocab.status().code(), setup.model_path + ": " + vocab.status().message());
  }
  auto chat = tokenizer::ChatTemplate::FromGguf((*model)->file(), **vocab);
  if (!chat.ok()) {
    return Status(chat.status().code(), setup.model_path + ": " + chat.status().message());
  }
  if (chat->is_fallback()) out.chat_warning = chat->fallback_reason();
  out.chat = std::make_unique<tokenizer::ChatTemplate>(std::move(chat).value());
  auto backend = MakeBackend(kind, std::move(model).value());
  if (!backend.ok()) {
    return Status(backend.status().code(), "engine.backend: " + backend.status().message());
  }
  if (const char* fault = std::getenv(kInjectBackendFaultEnv); fault != nullptr) {
    auto steps = ParseInjectedFault(fault);
    if (!steps.ok()) return steps.status();
    if (steps->has_value()) {
      *backend = InjectFaultAfterSteps(std::move(backend).value(), **steps);
      out.fault_injection = "FAULT INJECTION: the backend breaks after " + std::to_string(**steps) +
                            " steps (" + kInjectBackendFaultEnv + ")";
    }
  }
  auto engine = Engine::Create(std::move(backend).value(), std::move(vocab).value(), setup.engine);
  if (!engine.ok()) return engine.status();
  out.engine = std::move(engine).value();
  return out;
}

}  // namespace streamd
