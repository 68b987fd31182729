// The input format of client_message_fuzz: what the clients of a few Session streams do, in
// order. Shared by the fuzzer (InputReader) and its seed writer (InputWriter), so both read and
// write the same bytes.
//
//   input := step*
//   step  := op [payload]
//   op    := one byte: bits 0-3 the kind; bits 4-7 a value v: the stream is v mod kStreams,
//            and v / kStreams (mod kCallers) says who calls when the step starts the
//            stream's call (the first step of a stream, or the first after its call ended):
//            0 anonymous (the caller of a daemon without API keys), 1 and 2 two tenants'
//            users (tenant "globex" with small quotas), 3 an admin (client_message_fuzz.cc)
//
// kinds (0-7 send, so that most steps carry a message):
//   0-7   kSend       payload: u16 length (little-endian), then that many bytes (fewer at the
//                     end of the input): one ClientMessage as the client wrote it, parsed by the
//                     server as SessionReactor parses it. A Resume whose session_id is one byte
//                     b names the (b mod n)-th id the server handed out so far (Opened, Forked),
//                     since ids are random: that is how an input resumes a real session.
//   8     kStall      the client stops reading (writes stay in flight), or reads again
//   9     kWriteFails the write in flight fails (the client vanished mid-write)
//   10    kHalfClose  the client is done writing (WritesDone)
//   11    kCancel     the client cancels the call (or its deadline passes)
//   12    kWait       time passes: the engine runs until no generation is left, the server's
//                     threads until they have nothing to do (bounded)
//   13    kDrain      the service shuts down: Drain, then the grace period ends
//                     (CancelGeneration) when the payload byte is odd
//   14    kCloseElsewhere  CloseSession from another call: payload byte b picks the stream's
//                     own session (b even) or the (b/2 mod n)-th id handed out
//   15    kTimers     the timers fire as if a long time passed: open_timeout (EndIfUnbound),
//                     the registry's reaper (offload_after, the per-client cap)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace streamd::fuzz {

inline constexpr int kStreams = 3;
inline constexpr int kCallers = 4;

enum class Op : uint8_t {
  kSend = 0,
  kStall = 8,
  kWriteFails = 9,
  kHalfClose = 10,
  kCancel = 11,
  kWait = 12,
  kDrain = 13,
  kCloseElsewhere = 14,
  kTimers = 15,
};

struct Step {
  Op op = Op::kWait;
  int stream = 0;
  int caller = 0;            // who calls, if this step starts the stream's call
  std::string_view message;  // kSend: the bytes the client wrote
  uint8_t arg = 0;           // kDrain, kCloseElsewhere
};

class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}

  std::optional<Step> Next() {
    if (at_ >= size_) return std::nullopt;
    const auto op = static_cast<uint8_t>(data_[at_++]);
    Step step;
    step.stream = (op >> 4) % kStreams;
    step.caller = ((op >> 4) / kStreams) % kCallers;
    const uint8_t kind = op & 0x0f;
    step.op = kind < 8 ? Op::kSend : static_cast<Op>(kind);
    if (step.op == Op::kSend) {
      const size_t length = Byte() | (Byte() << 8);
      const size_t n = length < size_ - at_ ? length : size_ - at_;
      step.message = std::string_view(data_ + at_, n);
      at_ += n;
    } else if (step.op == Op::kDrain || step.op == Op::kCloseElsewhere) {
      step.arg = static_cast<uint8_t>(Byte());
    }
    return step;
  }

 private:
  size_t Byte() { return at_ < size_ ? static_cast<uint8_t>(data_[at_++]) : 0; }

  const char* data_;
  size_t size_;
  size_t at_ = 0;
};

class InputWriter {
 public:
  // Who calls on the calls the next steps start (0 until said otherwise).
  InputWriter& As(int caller) {
    caller_ = caller;
    return *this;
  }
  InputWriter& Send(int stream, std::string_view message) {
    Do(Op::kSend, stream);
    bytes_.push_back(static_cast<char>(message.size() & 0xff));
    bytes_.push_back(static_cast<char>((message.size() >> 8) & 0xff));
    bytes_.append(message);
    return *this;
  }
  InputWriter& Do(Op op, int stream = 0) {
    const int v = stream + kStreams * caller_;  // < 16 for every caller below kCallers
    bytes_.push_back(static_cast<char>(static_cast<uint8_t>(op) | (v << 4)));
    return *this;
  }
  InputWriter& Do(Op op, int stream, uint8_t arg) {
    Do(op, stream);
    bytes_.push_back(static_cast<char>(arg));
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
  int caller_ = 0;
};

}  // namespace streamd::fuzz
