#include "engine/host/load_engine.h"

#include <cstdlib>

#include "engine/backends/backend.h"
#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/model_check.h"
#include "engine/backends/fault_injection.h"
#include "engine/build_plan/plan_binding.h"
#include "engine/snapshot/model_fingerprint.h"

namespace streamd {

StatusOr<LoadedEngine> LoadEngine(const EngineSetup& setup) {
  LoadedEngine out;
  auto model = LoadCpuModel(setup.model_path, setup.plan_path, &out.plan_note);
  if (!model.ok()) {
    // Every problem of the file at once (architecture, tensor types, tokenizer), not only the
    // first the loader met; a failure that is not the file's (a plan) stays as it was.
    if (Status found = CheckModelFile(setup.model_path); !found.ok()) return found;
    return model.status();
  }
  const bool planned = !setup.plan_path.empty();
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
  const BackendKind kind =
      ResolveBackend(setup.backend == BackendChoice::kCuda  ? BackendKind::kCuda
                     : setup.backend == BackendChoice::kCpu ? BackendKind::kCpu
                                                            : BackendKind::kAuto,
                     &out.backend_note);
  if (planned && kind != BackendKind::kCpu) {
    if (setup.backend == BackendChoice::kCuda) {
      return FailedPreconditionError("model.plan: " + setup.plan_path +
                                     " is a cpu plan, and engine.backend is cuda; set "
                                     "engine.backend: cpu to use it");
    }
    // auto picked the GPU: the best backend here wins over a plan for the other one.
    out.plan_note = "ignored: " + setup.plan_path + " is a cpu plan, and engine.backend auto " +
                    "picked cuda (" + out.backend_note + ")";
  }
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
