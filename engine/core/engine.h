// Engine: many long-lived sessions over one model and one KV pool, advanced by a scheduler
// thread that runs one batched forward pass per step (continuous batching).
//
// Thread-safety: every public method may be called from any thread. Session state lives
// under one mutex that the scheduler holds only to plan a step and to apply its results,
// never during the forward pass. Events go to each generation's EventSink after the lock is
// released.
//
// Context rules:
//  - Append adds tokens to the session's context; nothing is generated. A session that is
//    generating rejects Append (FAILED_PRECONDITION): cancel first (the server does this for
//    barge-in).
//  - Generate continues the context. Every sampled token that was delivered stays in the
//    context, including the end-of-generation token that closed a turn and the tokens before
//    a cancel; a later Append or Generate continues after them.
//  - The last token of an idle session's context is held back from the cache until the next
//    Generate needs its logits: no logits are stored between generations. A generation
//    cancelled while its last token is in flight gives that token back (it stays pending; its
//    K/V slot is simply written again by the next step).
// Steps: the scheduler plans each step once (StepPlanner picks the chunks, PlanStep places them
// and describes every token's slot and span as a StepPlan), the backend executes the plan, and
// the scheduler commits it, all through its StepRunner (step_runner.h), the step driver the
// tools share. Backends plan nothing.
// Admission: Open reserves the session's block bound (SessionCache::BoundBlocks); the pool also
// keeps a fixed prefill headroom that each step's chunks share. A model whose local layers keep
// caches of their own has a second pool for them, reserved and bounded the same way (KvPools). When
// the pool cannot hold the bound, Open waits up to admission_timeout, then fails with
// RESOURCE_EXHAUSTED naming the numbers. An admitted session can never run out of blocks and is
// never preempted. State: Capture reads a session out as a SessionState (between generations),
// Restore creates one from it (same id) in this engine's pool; the K/V copies run on the caller's
// thread while the session sits out the steps, so neither holds up the scheduler. Backend: any
// ModelBackend (CPU or CUDA); the pool is made by the backend, so it lives where that backend's
// Execute reads it. A failed forward pass (bad input, or a device fault) ends the generations of
// every session in that step with FinishReason::kError and its status; a backend that cannot run
// any more is reported by BackendHealth (the server's health check).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/cache/block_pool.h"
#include "engine/core/engine_types.h"
#include "engine/core/kv_pools.h"
#include "engine/core/step_planner.h"
#include "engine/core/step_runner.h"
#include "engine/model/model_backend.h"
#include "engine/snapshot/session_state.h"
#include "engine/tokenizer/tokenizer.h"

namespace streamd {

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<ModelBackend> model,
                                                  std::unique_ptr<tokenizer::Tokenizer> tokenizer,
                                                  EngineConfig config);
  ~Engine();  // stops the scheduler; running generations end without a Done event
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  StatusOr<SessionId> Open(const SessionOptions& options);
  // `metadata` (the caller's facts about the context, SetMetadata) is set in the same step as
  // the tokens: a snapshot never holds one without the other.
  using MetadataUpdates = std::vector<std::pair<std::string, std::string>>;
  // With `partial`, the tokens are speculative: the next Append replaces them. That Append
  // keeps their common prefix with its own tokens, rewinds the rest of the context after it
  // (the partial's other tokens and whatever followed them: a generation started on the
  // partial is cancelled first, its GenerationDone says CANCELLED) and appends its remaining
  // tokens. An Append identical to the partial changes nothing, and a generation running on the
  // partial goes on. FAILED_PRECONDITION (naming the limit) when the rewind would need rows the
  // window has evicted.
  // kAfterPartial adds input behind an open partial without replacing it (the server's chat
  // prompt before a Generate): the partial's replacement rewinds it too.
  enum class AppendMode { kFinal, kPartial, kAfterPartial };
  Status Append(SessionId id, std::span<const int32_t> tokens, const MetadataUpdates& metadata = {},
                AppendMode mode = AppendMode::kFinal);
  Status Generate(SessionId id, GenerateOptions options, EventSink sink);
  // Ends the running generation with FinishReason::kCancelled (OK if none is running).
  Status Cancel(SessionId id);
  // Drops the output of the session's last generation (named by its request_id) after its
  // first `keep_tokens` from the context, as if it had never been produced: the K/V rows leave
  // the cache and the counters go back. A generation still running is cancelled first (its
  // GenerationDone says CANCELLED). Errors name the field: NOT_FOUND "truncate.request_id"
  // when it is not the last generation, INVALID_ARGUMENT "truncate.keep_tokens" outside
  // [0, generated], FAILED_PRECONDITION when input was appended after it, or when the shorter
  // context needs rows the window has evicted (the message names how many can be dropped).
  StatusOr<SessionInfo> Truncate(SessionId id, const std::string& request_id, int64_t keep_tokens);
  // A new session of the same tenant with a copy of this one's context, settings and pending
  // input; its K/V blocks are shared with the parent (copy-on-write in the pool), so it costs
  // blocks only as it writes. Admission reserves its full bound (once its window slides it holds
  // only blocks of its own), never preempting: RESOURCE_EXHAUSTED when that does not fit.
  // FAILED_PRECONDITION while the session generates. Sampling: a session's generations seed
  // their sampler afresh from its settings (SamplingParams::seed), so the copied settings are
  // the copied RNG state: with a fixed seed the fork samples as the parent would.
  StatusOr<SessionId> Fork(SessionId id);
  // Frees the session's blocks at once (after the step in flight, if it is in one). Returns
  // once the events made before it are delivered, also those of a step that ended the
  // session's generation and is still delivering them: the server ends the session's stream
  // (and, at shutdown, what its sinks use) after Close.
  Status Close(SessionId id);

  // The session as a SessionState: FAILED_PRECONDITION while it generates (capture between
  // generations), NOT_FOUND when it does not exist. Waits for the step it is in, if any.
  StatusOr<SessionState> Capture(SessionId id);
  // The same into *out, reusing its buffers (a writer that captures session after session
  // allocates and faults in no new K/V memory). The K/V come out as the pool stores them (f16,
  // or int8 with the pool's scales in kv.scales: kv_image.h). With `kv_destination`, they are
  // not put in out->kv's vectors (left empty; its dimensions, dtype and scales are set):
  // kv_destination(*out) is called with everything else filled in and returns where to gather
  // them (kv.bytes() bytes), e.g. straight into a snapshot buffer (EncodeSnapshotAroundKv).
  using KvDestination = std::function<void*(const SessionState&)>;
  Status CaptureInto(SessionId id, SessionState* out, const KvDestination& kv_destination = {});
  // Creates a session from a state (same id, settings, context and K/V), at once or not at all:
  // ALREADY_EXISTS for an id in use, RESOURCE_EXHAUSTED when its bound does not fit now,
  // INVALID_ARGUMENT naming the field when the state does not fit this model or engine.
  Status Restore(const SessionState& state);
  // The same with the K/V from `kv` (a view into a snapshot's bytes) instead of state.kv's data.
  Status Restore(const SessionState& state, const KvView& kv);
  // Closes the session only if its context did not change since `revision` (the revision of
  // a snapshot just written: prefill progress since does not count, the snapshot holds that
  // input as pending) and it does not generate; an offload that raced with new input keeps
  // the session: FAILED_PRECONDITION.
  Status CloseIfUnchanged(SessionId id, uint64_t revision);
  // Opaque per-session facts of the caller (the server's chat state), kept in SessionState.
  Status SetMetadata(SessionId id, const std::string& key, const std::string& value);

  StatusOr<SessionInfo> Get(SessionId id) const;
  std::vector<SessionInfo> List() const;
  EngineStats Stats() const;
  // OK while the backend can run steps. After a fault it cannot recover from, the first such
  // error for ever after: the backend said so (a sticky device error), or
  // kMaxFailedStepsInARow steps failed with no success between (a failed allocation, any
  // persistent fault). Open and Generate then fail with UNAVAILABLE; the process must restart.
  Status BackendHealth() const;
  // Whether an Open with `options` would be admitted now, without waiting (readiness).
  bool CanAdmit(const SessionOptions& options) const;
  static constexpr int32_t kMaxFailedStepsInARow = 8;

  const ModelBackend& model() const { return *model_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const EngineConfig& config() const { return config_; }

 private:
  struct Generation;
  struct Session;
  struct StepChunk;

  Engine(std::unique_ptr<ModelBackend> model, std::unique_ptr<tokenizer::Tokenizer> tokenizer,
         EngineConfig config, std::unique_ptr<KvPools> pools);
  Status ValidateOptions(const SessionOptions& options) const;
  StatusOr<Session*> Find(SessionId id) const;  // requires mu_
  // Waits until session `id` is in no step and not being copied (requires mu_ on entry, which
  // is released meanwhile), and returns it; null when it is gone: closed while it was in a
  // step, it is destroyed when that step ends. Callers must use the session it returns, never
  // one found before the wait.
  Session* WaitUntilIdle(std::unique_lock<std::mutex>& lock, SessionId id);
  // WaitUntilIdle for an operation on a session that must still be there afterwards:
  // UNAVAILABLE when the engine began stopping meanwhile, NOT_FOUND when it was closed.
  StatusOr<Session*> WaitForIdleSession(std::unique_lock<std::mutex>& lock, SessionId id);
  SessionInfo InfoOf(const Session& s) const;  // requires mu_
  bool HasWork() const;                        // requires mu_
  void Loop();
  void RunStep(std::unique_lock<std::mutex>& lock);
  // Applies a token sampled for a generating session (delivered, and now in its context);
  // appends the events to deliver.
  void ApplyToken(Session& s, int32_t token,
                  std::vector<std::pair<EventSink, GenerationEvent>>& out);
  void Finish(Session& s, FinishReason reason, Status status,
              std::vector<std::pair<EventSink, GenerationEvent>>& out);
  void DestroyClosed();  // requires mu_
  // Calls the sinks of `events` in the order the engine made them: every batch is made under
  // mu_ and takes a ticket there; `lock` holds mu_ and is released, and the batch goes out once
  // the batches before it have (DeliverInTurn, no engine lock held while waiting or while the
  // sinks run; sinks never call into the engine). So a Cancel's GenerationDone never overtakes
  // the tokens of the step before it. With `after_earlier`, it returns only after every batch
  // made before, even when `events` is empty.
  void Deliver(std::unique_lock<std::mutex>& lock,
               std::vector<std::pair<EventSink, GenerationEvent>>& events,
               bool after_earlier = false);
  void DeliverInTurn(uint64_t ticket, std::vector<std::pair<EventSink, GenerationEvent>>& events);
  // Drops the last n tokens of the session's context (pending input first, then the cache,
  // keeping the idle session's last token pending); nothing changes on error. Requires mu_
  // and a session that is not in a step.
  Status RewindContext(Session& s, int64_t n, std::string_view field);
  // The planner's key for a tenant (SessionOptions::tenant), counted per open session; a
  // tenant whose last session goes is forgotten (requires mu_).
  uint32_t AddTenantSession(const std::string& tenant);
  void RemoveTenantSession(const std::string& tenant);

  std::unique_ptr<ModelBackend> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  EngineConfig config_;
  std::unique_ptr<KvPools> pools_;  // guarded by mu_ (the pools' bookkeeping, and admission)

  mutable std::mutex mu_;
  uint64_t next_delivery_ticket_ = 0;  // guarded by mu_
  std::mutex delivery_mu_;             // guards delivered_tickets_
  std::condition_variable delivery_cv_;
  uint64_t delivered_tickets_ = 0;
  std::condition_variable work_cv_;       // the scheduler waits for work
  std::condition_variable admission_cv_;  // Open waits for blocks
  std::condition_variable step_cv_;       // a step ended, or a capture finished
  std::map<SessionId, std::unique_ptr<Session>> sessions_;
  uint64_t next_key_ = 1;  // the planner's name for a session (never reused)
  struct TenantKey {
    uint32_t key = 0;
    int64_t sessions = 0;
  };
  std::unordered_map<std::string, TenantKey> tenant_keys_;  // tenants with open sessions
  uint32_t next_tenant_key_ = 0;  // the planner's name for a tenant (not reused while open)
  StepPlanner planner_;
  StepRunner runner_;  // plans, runs and commits every step (only the scheduler thread uses it)
  EngineStats stats_;
  Status backend_fault_;  // BackendHealth()
  int32_t failed_steps_in_a_row_ = 0;
  bool stopping_ = false;
  std::vector<float> logits_;
  // Scratch of RunStep, reused from step to step: the planner's input and each entry's session.
  std::vector<SessionWork> step_work_;
  std::vector<Session*> step_sessions_;
  std::vector<int64_t> step_evicted_before_;  // each chunk's evicted count before the commit
  std::thread thread_;
};

}  // namespace streamd
