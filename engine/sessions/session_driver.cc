#include "engine/sessions/session_driver.h"

#include <chrono>
#include <utility>

namespace streamd {
namespace {

// How long a cancelled generation may take to report its end (one forward pass at most).
constexpr std::chrono::seconds kCancelWait{10};

}  // namespace

SessionDriver::SessionDriver(Engine& engine, SessionRegistry& registry, const ChatFormatter& chat,
                             TaskRunner& tasks)
    : engine_(engine), registry_(registry), chat_(chat), tasks_(tasks) {}

bool SessionDriver::Generating(const SessionRecord& s) const {
  std::lock_guard<std::mutex> lock(s.mu);
  return s.generating;
}

bool SessionDriver::Append(const std::shared_ptr<SessionRecord>& s, SessionInput input,
                           AppendDone done) {
  if (Generating(*s) && RepeatsOpenPartial(*s, input)) {
    done(AppendNow(s, input), false);
    return false;
  }
  // Barge-in: the client's new input wins. The generation is cancelled and the Append goes on
  // after its GenerationDone, so the context never changes under a generation.
  auto deferred = std::make_shared<SessionInput>(std::move(input));
  if (CancelThen(s, OkStatus(),
                 [this, s, deferred, done] { done(AppendNow(s, *deferred), true); })) {
    return true;
  }
  done(AppendNow(s, *deferred), false);
  return false;
}

StatusOr<std::vector<int32_t>> SessionDriver::TokensOf(const SessionInput& input, bool first_input,
                                                       ChatState* chat) const {
  switch (input.kind) {
    case SessionInput::Kind::kTokens:
      *chat = ChatState::kNone;
      return input.tokens;
    case SessionInput::Kind::kRaw:
      return chat_.Raw(input.text, input.parse_special, first_input, chat);
    case SessionInput::Kind::kTurn:
      break;
  }
  return chat_.Turn(input.role, input.text, first_input, chat);
}

StatusOr<int64_t> SessionDriver::AppendNow(const std::shared_ptr<SessionRecord>& s,
                                           const SessionInput& input) {
  const AppendBase base = AppendBaseOf(*s);
  ChatState chat = base.chat;
  StatusOr<std::vector<int32_t>> tokens = TokensOf(input, base.first_input, &chat);
  if (!tokens.ok()) return tokens.status();
  if (tokens->empty()) return InvalidArgumentError("append.text encodes to no tokens");
  const auto count = static_cast<int64_t>(tokens->size());
  // The chat state goes into the session's snapshot together with the tokens it describes.
  const Status appended =
      engine_.Append(s->id, *tokens, ChatMetadata(chat, true),
                     input.partial ? Engine::AppendMode::kPartial : Engine::AppendMode::kFinal);
  if (!appended.ok()) return appended;
  RecordAppend(*s, input.partial, base, *std::move(tokens), chat);
  SaveState(*s);
  return count;
}

SessionDriver::AppendBase SessionDriver::AppendBaseOf(SessionRecord& s) const {
  std::lock_guard<std::mutex> lock(s.mu);
  AppendBase base;
  base.replaces_partial = s.partial_open;
  base.chat = base.replaces_partial ? s.chat_before_partial : s.chat;
  base.first_input = base.replaces_partial ? !s.has_input_before_partial : !s.has_input;
  return base;
}

bool SessionDriver::RepeatsOpenPartial(SessionRecord& s, const SessionInput& input) const {
  ChatState chat;
  bool first_input;
  std::vector<int32_t> partial_tokens;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.partial_open) return false;
    chat = s.chat_before_partial;
    first_input = !s.has_input_before_partial;
    partial_tokens = s.partial_tokens;
  }
  auto tokens = TokensOf(input, first_input, &chat);
  return tokens.ok() && *tokens == partial_tokens;
}

void SessionDriver::RecordAppend(SessionRecord& s, bool partial, const AppendBase& base,
                                 std::vector<int32_t> tokens, ChatState chat) {
  std::lock_guard<std::mutex> lock(s.mu);
  if (partial) {
    // A partial replacing a partial keeps the state from before the first: every replacement
    // is encoded as if no partial had been sent.
    if (!base.replaces_partial) {
      s.chat_before_partial = base.chat;
      s.has_input_before_partial = !base.first_input;
    }
    s.partial_tokens = std::move(tokens);
  }
  s.partial_open = partial;
  s.chat = chat;
  s.has_input = true;
}

void SessionDriver::SaveState(SessionRecord& s) {
  ChatState chat;
  bool has_input;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.closed) return;  // closed meanwhile: nothing is left to save
    chat = s.chat;
    has_input = s.has_input;
  }
  // Unchanged values leave the engine's revision alone.
  for (const auto& [key, value] : ChatMetadata(chat, has_input)) {
    (void)engine_.SetMetadata(s.id, key, value);
  }
  registry_.Touched(s);
}

Status SessionDriver::Generate(const std::shared_ptr<SessionRecord>& s, GenerateOptions options,
                               GenerationCallbacks callbacks) {
  ChatState chat;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->generating) {
      return FailedPreconditionError("session " + s->id.ToString() +
                                     " is already generating (request_id \"" + s->request_id +
                                     "\"); send Cancel or wait for its GenerationDone");
    }
    chat = s->chat;
  }
  // After a system/user turn the answer starts with the template's assistant header.
  const std::vector<int32_t> prompt = chat_.GenerationPrompt(&chat);
  if (!prompt.empty()) {
    // Behind an open partial: its replacement rewinds this prompt too.
    const Status appended =
        engine_.Append(s->id, prompt, ChatMetadata(chat, true), Engine::AppendMode::kAfterPartial);
    if (!appended.ok()) return appended;
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->chat = chat;
    s->has_input = s->has_input || !prompt.empty();
    s->generating = true;
    ++s->generation;
    s->request_id = options.request_id;
    s->cancel_reason = OkStatus();
  }
  auto shared = std::make_shared<GenerationCallbacks>(std::move(callbacks));
  const Status started =
      engine_.Generate(s->id, std::move(options), [this, s, shared](GenerationEvent&& event) {
        const bool done = event.kind == GenerationEvent::Kind::kDone;
        const int64_t output_tokens = event.output_tokens;
        if (done) OnDone(s, event);
        shared->on_event(std::move(event));
        if (!done) return;
        // The engine may not be called from its sink: the rest runs on the task thread.
        tasks_.Post([this, s, shared, n = output_tokens] {
          SaveState(*s);
          if (shared->on_ended) shared->on_ended(n);
          std::vector<std::function<void()>> then;
          {
            std::lock_guard<std::mutex> lock(s->mu);
            then.swap(s->after_generation);
          }
          for (auto& f : then) f();
        });
      });
  if (!started.ok()) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->generating = false;
    }
    s->generation_ended.notify_all();
  }
  return started;
}

void SessionDriver::OnDone(const std::shared_ptr<SessionRecord>& s, GenerationEvent& done) {
  Status note;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->generating = false;
    s->request_id.clear();
    note = std::exchange(s->cancel_reason, OkStatus());
    ChatFormatter::OnGenerationEnd(done.reason == FinishReason::kEndOfGeneration, &s->chat);
  }
  s->generation_ended.notify_all();
  if (done.status.ok() && !note.ok()) done.status = std::move(note);
}

Status SessionDriver::Cancel(const std::shared_ptr<SessionRecord>& s,
                             const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->generating) return OkStatus();  // nothing runs: cancelling is a no-op
    if (!request_id.empty() && request_id != s->request_id) {
      return FailedPreconditionError("cancel.request_id \"" + request_id +
                                     "\" is not the running generation (\"" + s->request_id +
                                     "\")");
    }
  }
  (void)engine_.Cancel(s->id);
  return OkStatus();
}

void SessionDriver::CancelFromSink(const std::shared_ptr<SessionRecord>& s, Status why) {
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->generating || !s->cancel_reason.ok()) return;  // already being cancelled
    s->cancel_reason = std::move(why);
    generation = s->generation;
  }
  tasks_.Post([this, s, generation] {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      if (!s->generating || s->generation != generation) return;
    }
    (void)engine_.Cancel(s->id);
  });
}

void SessionDriver::StopGeneration(SessionRecord& s, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.generating) return;
    if (!why.ok() && s.cancel_reason.ok()) s.cancel_reason = why;
  }
  // The GenerationDone arrives inside Cancel, or from the scheduler thread right after the
  // step that finished the generation first.
  (void)engine_.Cancel(s.id);
  std::unique_lock<std::mutex> lock(s.mu);
  s.generation_ended.wait_for(lock, kCancelWait, [&] { return !s.generating; });
}

bool SessionDriver::WhenIdle(const std::shared_ptr<SessionRecord>& s, std::function<void()> then) {
  std::lock_guard<std::mutex> lock(s->mu);
  if (!s->generating) return false;
  // The Done clears `generating` under the session's lock and only then posts the work that
  // runs this list: it cannot be missed.
  s->after_generation.push_back(std::move(then));
  return true;
}

bool SessionDriver::CancelThen(const std::shared_ptr<SessionRecord>& s, const Status& why,
                               std::function<void()> then) {
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->generating) return false;
    if (!why.ok() && s->cancel_reason.ok()) s->cancel_reason = why;
    s->after_generation.push_back(std::move(then));
  }
  // The GenerationDone arrives inside Cancel, or from the scheduler thread right after the
  // step that finished the generation first.
  (void)engine_.Cancel(s->id);
  return true;
}

void SessionDriver::Truncate(const std::shared_ptr<SessionRecord>& s, std::string request_id,
                             int64_t keep_tokens, InfoDone done) {
  auto now = [this, s, request_id, keep_tokens, done] {
    done(TruncateNow(s, request_id, keep_tokens));
  };
  // A running generation of that request_id is cancelled first; its GenerationDone goes out
  // before the truncation's answer.
  bool running_other = false;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    running_other = s->generating && s->request_id != request_id;
  }
  if (running_other || !CancelThen(s, OkStatus(), now)) tasks_.Post(now);
}

StatusOr<SessionInfo> SessionDriver::TruncateNow(const std::shared_ptr<SessionRecord>& s,
                                                 const std::string& request_id,
                                                 int64_t keep_tokens) {
  auto before = engine_.Get(s->id);
  auto info = engine_.Truncate(s->id, request_id, keep_tokens);
  if (!info.ok()) return info.status();
  {
    std::lock_guard<std::mutex> lock(s->mu);
    // A dropped tail holds the turn's end-of-generation token, if any (always the last): the
    // assistant's turn is open again.
    if (s->chat == ChatState::kAssistantClosed && before.ok() &&
        info->tokens_seen < before->tokens_seen) {
      s->chat = ChatState::kAssistantOpen;
    }
  }
  SaveState(*s);
  return info;
}

void SessionDriver::Fork(const std::shared_ptr<SessionRecord>& s, std::function<Status()> allowed,
                         ForkDone done) {
  tasks_.Post([this, s, allowed = std::move(allowed), done = std::move(done)] {
    const Status quota = allowed ? allowed() : OkStatus();
    if (!quota.ok()) return done(quota);
    done(registry_.Fork(s));
  });
}

}  // namespace streamd
