// SessionDriver: what an attached session says and hears, in the protocol's order: input (chat
// turns, raw text, tokens, partial input and its replacement), one generation at a time,
// barge-in, truncate and fork. It keeps the session's conversation state (SessionRecord: the chat
// turn that is open, the partial, the running generation and its request id) and writes it into
// the session's snapshot with the tokens it describes. A transport (server/) only converts its
// wire messages into these calls and their answers back; it keeps no session state of its own.
//
// Threads: every call may come from any thread except an EventSink (the scheduler's), unless it
// says so. Nothing blocks on the engine's scheduler except StopGeneration (shutdown): what has to
// wait for a generation's end (a barge-in Append, a Truncate of the running generation, a stream
// that ends after its generation) is queued on the session and run on the task thread once the
// GenerationDone has been delivered, in the order it was queued.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/sessions/chat_formatter.h"
#include "engine/sessions/session_registry.h"
#include "engine/util/task_runner.h"

namespace streamd {

// One Append: a chat turn, raw text, or tokens.
struct SessionInput {
  enum class Kind { kRaw, kTurn, kTokens };
  Kind kind = Kind::kRaw;
  ChatRoleKind role = ChatRoleKind::kUser;  // kTurn
  std::string text;                         // kRaw, kTurn
  bool parse_special = false;               // kRaw: special-token text becomes special tokens
  std::vector<int32_t> tokens;              // kTokens
  // Speculative input (an interim transcript): the next Append replaces it (Engine::Append).
  bool partial = false;
};

// What a generation's caller hears.
struct GenerationCallbacks {
  // Every token and the GenerationDone, on the scheduler thread (must not block or call into
  // sessions or the engine). A Done whose generation the server cancelled for a reason (a slow
  // client, the stream's end) carries that reason in its status.
  EventSink on_event;
  // On the task thread after the Done was delivered and the session's state saved, before the
  // work that waited for the generation's end: `output_tokens` it generated.
  std::function<void(int64_t output_tokens)> on_ended;
};

class SessionDriver {
 public:
  // All must outlive the driver.
  SessionDriver(Engine& engine, SessionRegistry& registry, const ChatFormatter& chat,
                TaskRunner& tasks);

  // Appends `input`. A running generation is cancelled first (barge-in: the new input wins; its
  // GenerationDone says CANCELLED) unless `input` repeats the open partial exactly, which
  // changes nothing and lets it go on. `done` gets the tokens appended (or why not): at once, or
  // after the cancelled generation's end on the task thread (`later`); returns true in that case.
  using AppendDone = std::function<void(StatusOr<int64_t> appended_tokens, bool later)>;
  bool Append(const std::shared_ptr<SessionRecord>& s, SessionInput input, AppendDone done);

  // Starts a generation: the template's assistant header first when a system/user turn is open,
  // then the engine's generation. One call; FAILED_PRECONDITION while one runs.
  Status Generate(const std::shared_ptr<SessionRecord>& s, GenerateOptions options,
                  GenerationCallbacks callbacks);
  // Cancels the running generation (OK when none runs); `request_id`, when not empty, must name
  // it (FAILED_PRECONDITION "cancel.request_id ..." otherwise).
  Status Cancel(const std::shared_ptr<SessionRecord>& s, const std::string& request_id);
  // From an EventSink: cancels the running generation (once) with `why` in its GenerationDone;
  // the engine call runs on the task thread.
  void CancelFromSink(const std::shared_ptr<SessionRecord>& s, Status why);
  // Cancels the running generation, noting `why` (when not OK) for its GenerationDone, and waits
  // for the GenerationDone (a bounded wait). Shutdown only: it blocks.
  void StopGeneration(SessionRecord& s, const Status& why);
  // When a generation runs: cancels it (noting `why` when not OK), queues `then` to run on the
  // task thread after its end, and returns true. False, doing nothing, when none runs.
  bool CancelThen(const std::shared_ptr<SessionRecord>& s, const Status& why,
                  std::function<void()> then);
  // The same without cancelling: `then` runs after the running generation ends by itself.
  bool WhenIdle(const std::shared_ptr<SessionRecord>& s, std::function<void()> then);

  // Drops the tail of the last generation after `keep_tokens` (Engine::Truncate), cancelling it
  // first when it still runs. `done` runs on the task thread with the session's cache then.
  using InfoDone = std::function<void(StatusOr<SessionInfo>)>;
  void Truncate(const std::shared_ptr<SessionRecord>& s, std::string request_id,
                int64_t keep_tokens, InfoDone done);
  // A copy-on-write fork (SessionRegistry::Fork) on the task thread, one at a time: `allowed`
  // (the caller's quota) is asked there first, so that forks of one tenant cannot all pass.
  using ForkDone = std::function<void(StatusOr<std::shared_ptr<SessionRecord>>)>;
  void Fork(const std::shared_ptr<SessionRecord>& s, std::function<Status()> allowed,
            ForkDone done);

  bool Generating(const SessionRecord& s) const;

 private:
  // What an Append's tokens are encoded from. The replacement of an open partial is encoded as
  // if the partial had never been sent: from the chat state before it.
  struct AppendBase {
    ChatState chat = ChatState::kNone;
    bool first_input = false;       // the session's first input (BOS, template start)
    bool replaces_partial = false;  // an open partial is replaced
  };
  AppendBase AppendBaseOf(SessionRecord& s) const;
  // True when `input` encodes to exactly the open partial's tokens (its final version).
  bool RepeatsOpenPartial(SessionRecord& s, const SessionInput& input) const;
  StatusOr<std::vector<int32_t>> TokensOf(const SessionInput& input, bool first_input,
                                          ChatState* chat) const;
  StatusOr<int64_t> AppendNow(const std::shared_ptr<SessionRecord>& s, const SessionInput& input);
  // After the engine took an Append's `tokens` (encoded from `base`, leaving `chat`).
  void RecordAppend(SessionRecord& s, bool partial, const AppendBase& base,
                    std::vector<int32_t> tokens, ChatState chat);
  StatusOr<SessionInfo> TruncateNow(const std::shared_ptr<SessionRecord>& s,
                                    const std::string& request_id, int64_t keep_tokens);
  // The GenerationDone's bookkeeping (scheduler thread): the session is idle again.
  void OnDone(const std::shared_ptr<SessionRecord>& s, GenerationEvent& done);
  // Keeps the chat state in the session's snapshot (engine metadata) and marks the session
  // changed. Never from an EventSink (it calls the engine).
  void SaveState(SessionRecord& s);

  Engine& engine_;
  SessionRegistry& registry_;
  const ChatFormatter& chat_;
  TaskRunner& tasks_;
};

}  // namespace streamd
