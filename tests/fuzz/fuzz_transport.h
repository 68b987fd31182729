// FuzzTransport: SessionStream's Transport (what SessionReactor does with gRPC), in memory, for
// client_message_fuzz. The stream calls it from any thread; the fuzzer's driver thread plays
// gRPC: it completes the write in flight and the outstanding read when the input says so, and
// says when the reactor is gone (OnDone).
//
// It traps on what gRPC's callback API forbids or the reactor could not survive: a second
// write while one is in flight, a second outstanding read, a write or a second Finish after
// Finish, any call after OnDone (the reactor deletes itself there). Every message written goes
// through a ServerMessageChecker, in the order the stream writes them.
#pragma once

#include <mutex>

#include "server/session_stream.h"
#include "tests/fuzz/server_message_checker.h"

namespace streamd::fuzz {

class FuzzTransport final : public server::SessionStream::Transport {
 public:
  explicit FuzzTransport(ServerMessageChecker checker) : checker_(std::move(checker)) {}

  // ---- The stream's side (any thread) ----
  void StartWrite(const v1::ServerMessage* message) override {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_FUZZ_CHECK(!done_, "StartWrite after OnDone: the reactor is gone");
    STREAMD_FUZZ_CHECK(!finished_, "StartWrite after Finish");
    STREAMD_FUZZ_CHECK(!writing_, "two writes in flight");
    writing_ = true;
    checker_.OnWrite(*message);
  }
  void Finish(const grpc::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_FUZZ_CHECK(!done_, "Finish after OnDone: the reactor is gone");
    finished_ = true;
    checker_.OnFinish(status);
  }
  void ReadNext() override {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_FUZZ_CHECK(!done_, "ReadNext after OnDone: the reactor is gone");
    if (finished_) return;  // as SessionReactor: no read is started once the call is finished
    STREAMD_FUZZ_CHECK(!reading_, "two reads outstanding");
    reading_ = true;
  }

  // ---- gRPC's side (the driver thread) ----
  struct State {
    bool reading = false;   // a read is outstanding
    bool writing = false;   // a write is in flight
    bool finished = false;  // Finish was called
  };
  State state() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {reading_, writing_, finished_};
  }
  // Completes the outstanding read (true) or says there is none.
  bool TakeRead() { return Take(&reading_); }
  // Completes the write in flight (true) or says there is none.
  bool TakeWrite() { return Take(&writing_); }
  // OnDone has run: nothing may call in any more.
  void MarkDone() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  std::string session_id() const {  // the stream's session, once Opened was written
    std::lock_guard<std::mutex> lock(mu_);
    return checker_.session_id();
  }

 private:
  bool Take(bool* flag) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool was = *flag;
    *flag = false;
    return was;
  }

  mutable std::mutex mu_;
  ServerMessageChecker checker_;
  bool reading_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool done_ = false;
};

}  // namespace streamd::fuzz
