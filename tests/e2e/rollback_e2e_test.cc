// End-to-end: Truncate and Fork over the wire, against the real daemon and model. Out-of-range
// truncations are errors naming the field and the limit (and the limit the message names is
// exact), the stream goes on serving; a truncated session continues token for token like one
// that never saw the dropped tokens; a fork continues like its parent would have, while both
// generate (their steps interleaving); request ids that are not printable ASCII are refused
// naming the field; a fork belongs to its parent's tenant and does not exist for any other.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/e2e/daemon_process.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using namespace std::chrono_literals;

constexpr char kRiversQuestion[] = "Name three rivers of Europe.";
// Raw text the model continues for a long time without an end-of-generation token.
constexpr char kCounting[] = "1, 2, 3, 4, 5, 6, 7, 8,";

v1::ClientMessage TruncateMsg(const std::string& request_id, int32_t keep_tokens) {
  v1::ClientMessage m;
  m.mutable_truncate()->set_request_id(request_id);
  m.mutable_truncate()->set_keep_tokens(keep_tokens);
  return m;
}

v1::ClientMessage ForkMsg(const std::string& request_id) {
  v1::ClientMessage m;
  m.mutable_fork()->set_request_id(request_id);
  return m;
}

// The answer to a Truncate: its CacheState, or the Error.
struct Answer {
  std::optional<v1::CacheState> state;
  std::optional<v1::Error> error;
};

Answer Truncate(RawStream& s, const std::string& request_id, int32_t keep_tokens) {
  EXPECT_TRUE(s.Write(TruncateMsg(request_id, keep_tokens)));
  Answer a;
  auto m = s.Read();
  if (m && m->has_cache_state()) {
    a.state = m->cache_state();
  } else if (m && m->has_error()) {
    a.error = m->error();
  } else {
    ADD_FAILURE() << "expected CacheState or Error after Truncate, got "
                  << (m ? m->ShortDebugString() : std::string("end of stream"));
  }
  return a;
}

// Generates `n` greedy tokens with `request_id`; the generation must run to its length.
Generation GenerateExactly(RawStream& s, int32_t n, const std::string& request_id) {
  EXPECT_TRUE(s.Write(GenerateMsg(n, true, request_id)));
  Generation g = ReadGeneration(s);
  EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_LENGTH)
      << "the test needs a generation that runs to its length: " << g.done.ShortDebugString();
  EXPECT_EQ(g.done.usage().output_tokens(), n);
  EXPECT_EQ(g.ids.size(), static_cast<size_t>(n));
  return g;
}

// Resumes `id` on `s`; its Opened (nullopt + failure otherwise).
std::optional<v1::Opened> Resume(RawStream& s, const std::string& id) {
  EXPECT_TRUE(s.Write(ResumeMsg(id)));
  auto m = s.Read();
  if (!m || !m->has_opened()) {
    ADD_FAILURE() << "expected Opened, got "
                  << (m ? m->ShortDebugString() : std::string("end of stream"));
    return std::nullopt;
  }
  return m->opened();
}

void ExpectSameState(const v1::CacheState& a, const v1::CacheState& b) {
  EXPECT_EQ(a.tokens_seen(), b.tokens_seen());
  EXPECT_EQ(a.tokens_cached(), b.tokens_cached());
  EXPECT_EQ(a.tokens_evicted(), b.tokens_evicted());
  EXPECT_EQ(a.pending_tokens(), b.pending_tokens());
}

void CloseStream(RawStream& s) {
  s.Write(CloseMsg());
  EXPECT_TRUE(s.Finish().ok());
}

// One daemon for the suite, stepping one session at a time: the tests compare greedy tokens of
// different sessions, and on the CPU a step's sums differ in their last bits between batch
// shapes, which could flip a near-tie between sessions that happened to batch differently.
class RollbackE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<std::string> flags = kSharedServerFlags;
    flags.push_back("--engine.max_batch_sessions=1");
    daemon_ = DaemonProcess::Start(flags).release();
  }
  static void TearDownTestSuite() {
    if (daemon_ != nullptr) {
      daemon_->Terminate();
      EXPECT_EQ(daemon_->Wait(std::chrono::seconds(60)), 0) << daemon_->Stderr();
    }
    delete daemon_;
    daemon_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(daemon_, nullptr) << "the daemon did not start"; }
  static std::shared_ptr<grpc::Channel> Channel() { return daemon_->Channel(); }

  inline static DaemonProcess* daemon_ = nullptr;
};

TEST_F(RollbackE2eTest, TruncateOutsideWhatExistsIsAnErrorAndTheStreamGoesOn) {
  RawStream s(Channel(), 60s);
  ASSERT_TRUE(s.Open());
  {
    const Answer none = Truncate(s, "g1", 0);  // no generation yet
    ASSERT_TRUE(none.error);
    EXPECT_EQ(none.error->code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
    EXPECT_EQ(none.error->field(), "truncate.request_id") << none.error->message();
  }
  ASSERT_FALSE(s.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  const Generation g = GenerateExactly(s, 10, "g1");
  {
    const Answer over = Truncate(s, "g1", 11);
    ASSERT_TRUE(over.error);
    EXPECT_EQ(over.error->code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_EQ(over.error->field(), "truncate.keep_tokens");
    EXPECT_NE(over.error->message().find("outside [0, 10]"), std::string::npos)
        << over.error->message();
    EXPECT_EQ(over.error->request_id(), "g1");
  }
  {
    const Answer negative = Truncate(s, "g1", -1);
    ASSERT_TRUE(negative.error);
    EXPECT_EQ(negative.error->code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_EQ(negative.error->field(), "truncate.keep_tokens");
    EXPECT_NE(negative.error->message().find(">= 0"), std::string::npos)
        << negative.error->message();
  }
  {
    const Answer other = Truncate(s, "g0", 3);  // not the last generation
    ASSERT_TRUE(other.error);
    EXPECT_EQ(other.error->code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
    EXPECT_EQ(other.error->field(), "truncate.request_id");
    EXPECT_NE(other.error->message().find("\"g1\""), std::string::npos)
        << "names the last generation: " << other.error->message();
  }
  // Nothing was changed by the refusals; keeping all 10 changes nothing either.
  const Answer all = Truncate(s, "g1", 10);
  ASSERT_TRUE(all.state) << (all.error ? all.error->ShortDebugString() : "");
  ExpectSameState(*all.state, g.cache);
  // Input after the generation: its tail is no longer the context's.
  v1::CacheState appended;
  ASSERT_FALSE(s.Append(TextMsg(" And one more.").append(), &appended));
  {
    const Answer late = Truncate(s, "g1", 2);
    ASSERT_TRUE(late.error);
    EXPECT_EQ(late.error->code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
    EXPECT_EQ(late.error->field(), "truncate");
    EXPECT_NE(late.error->message().find("appended after"), std::string::npos)
        << late.error->message();
  }
  // The stream keeps serving, from the context the refusals left alone.
  // (The model may end its turn at once here: any end will do.)
  ASSERT_TRUE(s.Write(GenerateMsg(4, true, "g2")));
  const Generation after = ReadGeneration(s);
  ASSERT_TRUE(after.ended);
  EXPECT_GE(after.done.usage().output_tokens(), 1);
  EXPECT_EQ(after.cache.tokens_seen(), appended.tokens_seen() + after.done.usage().output_tokens());
  CloseStream(s);
}

// A window of 16: most of a 40-token generation is evicted. The refusal says how many tokens
// can be dropped; exactly that many can, one more cannot.
TEST_F(RollbackE2eTest, TruncateBeyondTheWindowNamesHowManyTokensCanBeDropped) {
  RawStream s(Channel(), 60s);
  ASSERT_TRUE(s.Open(OpenMsg(16).open()));
  ASSERT_FALSE(s.Append(TextMsg(kCounting).append()));
  const Generation g = GenerateExactly(s, 40, "long");
  ASSERT_GT(g.cache.tokens_evicted(), 0);
  const Answer all = Truncate(s, "long", 0);
  ASSERT_TRUE(all.error) << "dropping 40 tokens behind a window of 16 must be refused";
  EXPECT_EQ(all.error->code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_EQ(all.error->field(), "truncate.keep_tokens");
  const std::string& message = all.error->message();
  EXPECT_NE(message.find("window 16"), std::string::npos) << message;
  const size_t at = message.find("at most ");
  ASSERT_NE(at, std::string::npos) << message;
  const int most = std::atoi(message.c_str() + at + 8);
  ASSERT_GE(most, 0) << message;
  ASSERT_LT(most, 40) << message;
  const Answer one_more = Truncate(s, "long", 40 - most - 1);
  ASSERT_TRUE(one_more.error) << "dropping " << most + 1 << " was allowed; the message said "
                              << message;
  EXPECT_EQ(one_more.error->code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  const Answer exact = Truncate(s, "long", 40 - most);
  ASSERT_TRUE(exact.state) << "dropping " << most
                           << " was refused: " << (exact.error ? exact.error->message() : "");
  EXPECT_EQ(exact.state->tokens_seen(), g.cache.tokens_seen() - most);
  const Generation after = GenerateExactly(s, 3, "next");
  EXPECT_EQ(after.cache.tokens_seen(), exact.state->tokens_seen() + 3);
  CloseStream(s);
}

// Truncated: 12 generated, 5 kept. The reference generated only those 5: the same state, and
// the same greedy continuation, token for token.
TEST_F(RollbackE2eTest, TruncateThenGenerateEqualsASessionThatNeverSawTheDroppedTokens) {
  RawStream a(Channel(), 60s);
  RawStream b(Channel(), 60s);
  ASSERT_TRUE(a.Open());
  ASSERT_TRUE(b.Open());
  ASSERT_FALSE(a.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  ASSERT_FALSE(b.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  const Generation long_a = GenerateExactly(a, 12, "a1");
  const Answer cut = Truncate(a, "a1", 5);
  ASSERT_TRUE(cut.state) << (cut.error ? cut.error->message() : "");
  EXPECT_EQ(cut.state->tokens_seen(), long_a.cache.tokens_seen() - 7);
  const Generation short_b = GenerateExactly(b, 5, "b1");
  ASSERT_EQ(short_b.ids, std::vector<int32_t>(long_a.ids.begin(), long_a.ids.begin() + 5));
  ExpectSameState(*cut.state, short_b.cache);
  const Generation next_a = GenerateExactly(a, 16, "a2");
  const Generation next_b = GenerateExactly(b, 16, "b2");
  EXPECT_EQ(next_a.ids, next_b.ids) << "a: " << next_a.text << "\nb: " << next_b.text;
  EXPECT_EQ(next_a.text, next_b.text);
  CloseStream(a);
  CloseStream(b);
}

// A Truncate of the running generation cancels it first: GenerationDone (CANCELLED) and its
// CacheState, then the truncation's. Keeping none of it, the next generation is the first
// one again (same context, greedy); a Truncate naming another generation cancels nothing.
TEST_F(RollbackE2eTest, TruncateDuringAGenerationCancelsItFirst) {
  RawStream s(Channel(), 60s);
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  const Generation first = GenerateExactly(s, 8, "first");
  const Answer none = Truncate(s, "first", 0);
  ASSERT_TRUE(none.state) << (none.error ? none.error->message() : "");

  ASSERT_TRUE(s.Write(GenerateMsg(400, true, "running")));
  bool sent = false;
  std::optional<v1::Error> refused;
  std::optional<v1::GenerationDone> done;
  std::vector<v1::CacheState> states;  // the generation's, then the truncation's
  while (states.size() < 2) {
    auto m = s.Read();
    ASSERT_TRUE(m) << "the stream ended";
    if (m->has_token_delta() && !sent) {
      ASSERT_TRUE(s.Write(TruncateMsg("someone-else", 0)));
      ASSERT_TRUE(s.Write(TruncateMsg("running", 0)));
      sent = true;
    } else if (m->has_error()) {
      EXPECT_FALSE(refused) << "a second Error: " << m->ShortDebugString();
      refused = m->error();
    } else if (m->has_generation_done()) {
      done = m->generation_done();
    } else if (m->has_cache_state()) {
      ASSERT_TRUE(done) << "a CacheState before the GenerationDone";
      states.push_back(m->cache_state());
    }
  }
  // Naming another generation cancels nothing: it is refused while "running" goes on.
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(refused->field(), "truncate.request_id");
  EXPECT_NE(refused->message().find("\"running\""), std::string::npos) << refused->message();
  EXPECT_EQ(done->reason(), v1::FINISH_REASON_CANCELLED) << done->ShortDebugString();
  EXPECT_LT(done->usage().output_tokens(), 400);
  ExpectSameState(states[1], *none.state);
  const Generation again = GenerateExactly(s, 8, "again");
  EXPECT_EQ(again.ids, first.ids);
  CloseStream(s);
}

// Fork a session after a generation; the parent and the fork each generate 16 greedy tokens at
// the same time (their steps interleave, each writing blocks the two shared copy-on-write):
// both equal what a control session with the same history generates.
TEST_F(RollbackE2eTest, ForkContinuesLikeItsParentAndBothGoOnIndependently) {
  RawStream control(Channel(), 60s);
  ASSERT_TRUE(control.Open());
  ASSERT_FALSE(control.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  const Generation control_first = GenerateExactly(control, 6, "c1");
  const Generation control_next = GenerateExactly(control, 16, "c2");
  CloseStream(control);

  RawStream parent(Channel(), 60s);
  const auto opened = parent.Open();
  ASSERT_TRUE(opened);
  ASSERT_FALSE(parent.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  const Generation parent_first = GenerateExactly(parent, 6, "p1");
  ASSERT_EQ(parent_first.ids, control_first.ids);
  ASSERT_TRUE(parent.Write(ForkMsg("fork-1")));
  auto m = parent.Read();
  ASSERT_TRUE(m && m->has_forked()) << (m ? m->ShortDebugString() : "end of stream");
  const v1::Forked forked = m->forked();
  EXPECT_EQ(forked.request_id(), "fork-1");
  ASSERT_TRUE(IsSessionId(forked.session_id())) << forked.session_id();
  EXPECT_NE(forked.session_id(), opened->session_id());
  ExpectSameState(forked.cache(), parent_first.cache);

  RawStream child(Channel(), 60s, "", forked.session_id());
  const auto resumed = Resume(child, forked.session_id());
  ASSERT_TRUE(resumed);
  EXPECT_TRUE(resumed->resumed());
  ExpectSameState(resumed->cache(), parent_first.cache);
  // Both at once: their steps interleave.
  ASSERT_TRUE(parent.Write(GenerateMsg(16, true, "p2")));
  ASSERT_TRUE(child.Write(GenerateMsg(16, true, "f2")));
  const Generation parent_next = ReadGeneration(parent);
  const Generation child_next = ReadGeneration(child);
  EXPECT_EQ(parent_next.ids, control_next.ids) << parent_next.text << "\n" << control_next.text;
  EXPECT_EQ(child_next.ids, control_next.ids) << child_next.text << "\n" << control_next.text;
  // Diverging input stays in the session it went to.
  v1::CacheState child_state;
  ASSERT_FALSE(child.Append(TextMsg("Now in French.", v1::CHAT_ROLE_USER).append(), &child_state));
  const Generation parent_third = GenerateExactly(parent, 4, "p3");
  EXPECT_EQ(parent_third.cache.tokens_seen(), parent_next.cache.tokens_seen() + 4);
  EXPECT_GT(child_state.tokens_seen(), parent_next.cache.tokens_seen());
  CloseStream(child);
  CloseStream(parent);
}

TEST_F(RollbackE2eTest, ForkWhileGeneratingIsRefusedAndTheGenerationGoesOn) {
  RawStream s(Channel(), 60s);
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg(kCounting).append()));
  ASSERT_TRUE(s.Write(GenerateMsg(60, true, "g")));
  std::optional<v1::Error> refused;
  int64_t tokens = 0;
  bool sent = false;
  std::optional<v1::GenerationDone> done;
  while (auto m = s.Read()) {
    if (m->has_token_delta()) {
      tokens += m->token_delta().token_ids_size();
      if (!sent) {
        ASSERT_TRUE(s.Write(ForkMsg("f")));
        sent = true;
      }
    } else if (m->has_error()) {
      refused = m->error();
    } else if (m->has_forked()) {
      ADD_FAILURE() << "forked while generating: " << m->ShortDebugString();
    } else if (m->has_generation_done()) {
      done = m->generation_done();
      break;
    }
  }
  ASSERT_TRUE(done);
  ASSERT_TRUE(refused) << "no answer to the Fork during the generation";
  EXPECT_EQ(refused->code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_EQ(refused->field(), "fork") << refused->message();
  EXPECT_EQ(refused->request_id(), "f");
  EXPECT_EQ(done->reason(), v1::FINISH_REASON_LENGTH) << "the refusal must not stop it";
  EXPECT_EQ(done->usage().output_tokens(), 60);
  CloseStream(s);
}

TEST_F(RollbackE2eTest, RequestIdsThatAreNotPrintableAsciiAreRefusedNamingTheField) {
  RawStream s(Channel(), 60s);
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  GenerateExactly(s, 4, "ok");
  struct Case {
    v1::ClientMessage message;
    std::string field, says;
    std::string echoed;  // Error.request_id: a proto string, so never bytes that are not UTF-8
  };
  const std::vector<Case> cases = {
      {TruncateMsg(std::string("\xff\xfe", 2), 0), "truncate.request_id", "at offset 0", ""},
      {TruncateMsg(std::string("ok\xc3(", 4), 0), "truncate.request_id", "at offset 2", ""},
      {TruncateMsg(std::string(129, 'x'), 0), "truncate.request_id", "limit of 128",
       std::string(129, 'x')},
      {ForkMsg(std::string("\xc3\x28", 2)), "fork.request_id", "at offset 0", ""},
      {ForkMsg(std::string("f\x01", 2)), "fork.request_id", "at offset 1", std::string("f\x01", 2)},
      {ForkMsg(std::string(129, 'f')), "fork.request_id", "limit of 128", std::string(129, 'f')},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(s.Write(c.message));
    const v1::Error e = s.ExpectError();
    EXPECT_EQ(e.code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT)) << e.message();
    EXPECT_EQ(e.field(), c.field) << e.message();
    EXPECT_NE(e.message().find(c.says), std::string::npos) << e.message();
    EXPECT_EQ(e.request_id(), c.echoed);
  }
  // The stream is still open, and nothing was truncated or forked.
  const Answer kept = Truncate(s, "ok", 4);
  ASSERT_TRUE(kept.state) << (kept.error ? kept.error->message() : "");
  GenerateExactly(s, 3, "after");
  CloseStream(s);
}

v1::Append PartialMsg(const std::string& text, v1::ChatRole role = v1::CHAT_ROLE_UNSPECIFIED) {
  v1::Append a = TextMsg(text, role).append();
  a.set_partial(true);
  return a;
}

// Growing partials, each replacing the last, then the final turn: the context is the final
// turn's alone, as in a session that only ever got that.
TEST_F(RollbackE2eTest, PartialAppendsAreReplacedByTheNextAppend) {
  RawStream a(Channel(), 60s);
  RawStream b(Channel(), 60s);
  ASSERT_TRUE(a.Open());
  ASSERT_TRUE(b.Open());
  v1::CacheState first, second, final_a, final_b;
  ASSERT_FALSE(a.Append(PartialMsg("Name three rivers of As"), &first));
  ASSERT_FALSE(a.Append(PartialMsg("Name three rivers of Asia and Europe, please"), &second));
  EXPECT_GT(second.tokens_seen(), first.tokens_seen()) << "the longer partial replaced the first";
  ASSERT_FALSE(a.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append(), &final_a));
  ASSERT_FALSE(b.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append(), &final_b));
  ExpectSameState(final_a, final_b);
  const Generation ga = GenerateExactly(a, 10, "a");
  const Generation gb = GenerateExactly(b, 10, "b");
  EXPECT_EQ(ga.ids, gb.ids) << ga.text << "\n" << gb.text;
  CloseStream(a);
  CloseStream(b);
}

// A generation started on a partial: the same input as final keeps it running; other input
// cancels it (barge-in) and replaces the partial.
TEST_F(RollbackE2eTest, AFinalEqualToTheOpenPartialKeepsItsGeneration) {
  RawStream s(Channel(), 60s);
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(PartialMsg(kCounting)));
  ASSERT_TRUE(s.Write(GenerateMsg(40, true, "on-partial")));
  const Generation kept = ReadGeneration(s, [&] {
    v1::ClientMessage m;
    *m.mutable_append() = TextMsg(kCounting).append();  // the partial's final version
    ASSERT_TRUE(s.Write(m));
  });
  EXPECT_EQ(kept.done.reason(), v1::FINISH_REASON_LENGTH) << kept.done.ShortDebugString();
  EXPECT_EQ(kept.done.usage().output_tokens(), 40);

  ASSERT_FALSE(s.Append(PartialMsg(" And then")));
  ASSERT_TRUE(s.Write(GenerateMsg(400, true, "replaced")));
  const Generation replaced = ReadGeneration(s, [&] {
    v1::ClientMessage m;
    *m.mutable_append() = TextMsg(" But first").append();
    ASSERT_TRUE(s.Write(m));
  });
  EXPECT_EQ(replaced.done.reason(), v1::FINISH_REASON_CANCELLED)
      << replaced.done.ShortDebugString();
  // The replacement rewound the partial and the cancelled generation: the context is the 40
  // tokens' generation plus " But first" only.
  auto ack = s.Read();
  ASSERT_TRUE(ack && ack->has_cache_state()) << (ack ? ack->ShortDebugString() : "end");
  RawStream control(Channel(), 60s);
  ASSERT_TRUE(control.Open());
  ASSERT_FALSE(control.Append(TextMsg(kCounting).append()));
  const Generation control_gen = GenerateExactly(control, 40, "control");
  EXPECT_EQ(control_gen.ids, kept.ids);
  v1::CacheState control_state;
  ASSERT_FALSE(control.Append(TextMsg(" But first").append(), &control_state));
  EXPECT_EQ(ack->cache_state().tokens_seen(), control_state.tokens_seen());
  CloseStream(control);
  CloseStream(s);
}

// A partial whose start the window has slid past (a long generation on it) cannot be rewound:
// its replacement is refused naming append.partial and the window, the stream goes on, and the
// partial's own input, sent again, makes it final.
TEST_F(RollbackE2eTest, APartialTheWindowHasSlidPastCanOnlyBeMadeFinal) {
  RawStream s(Channel(), 60s);
  ASSERT_TRUE(s.Open(OpenMsg(16).open()));
  ASSERT_FALSE(s.Append(TextMsg(kCounting).append()));
  ASSERT_FALSE(s.Append(PartialMsg(" 9, 10,")));
  GenerateExactly(s, 40, "long");
  v1::ClientMessage other;
  *other.mutable_append() = TextMsg(" Stop.").append();
  ASSERT_TRUE(s.Write(other));
  const v1::Error refused = s.ExpectError();
  EXPECT_EQ(refused.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_EQ(refused.field(), "append.partial") << refused.message();
  EXPECT_NE(refused.message().find("window 16"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("send the partial's input again"), std::string::npos)
      << "says the way out: " << refused.message();
  v1::CacheState before, after;
  ASSERT_FALSE(s.Append(TextMsg(" 9, 10,").append(), &before));  // the partial, now final
  ASSERT_FALSE(s.Append(TextMsg(" Stop.").append(), &after));    // and input after it
  EXPECT_GT(after.tokens_seen(), before.tokens_seen());
  ASSERT_TRUE(s.Write(GenerateMsg(3, true, "next")));
  EXPECT_TRUE(ReadGeneration(s).ended);
  CloseStream(s);
}

// Tenants (auth.keys_file): a fork is its parent's tenant's, counts against its max_sessions,
// and for any other tenant does not exist (NOT_FOUND exactly like an unknown id, not listed).
class RollbackTenantE2eTest : public ::testing::Test {
 protected:
  static constexpr char kAcme[] = "acme-fork-key-3b9e";
  static constexpr char kGlobex[] = "globex-fork-key-81d0";
  static constexpr char kInitech[] = "initech-fork-key-5a7c";
  void SetUp() override {
    char tmpl[] = "/tmp/streamd-fork-e2e-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/keys.yaml")
        << "tenants:\n  globex: {max_sessions: 2}\n  initech: {max_sessions: 3}\nkeys:\n"
        << "  - {tenant: initech, role: user, sha256: " << Sha256Hex(kInitech) << "}\n"
        << "  - {tenant: acme, role: user, sha256: " << Sha256Hex(kAcme) << "}\n"
        << "  - {tenant: globex, role: user, sha256: " << Sha256Hex(kGlobex) << "}\n";
    d_ = DaemonProcess::Start({"--auth.keys_file=" + dir_ + "/keys.yaml"});
    ASSERT_NE(d_, nullptr);
  }
  void TearDown() override {
    d_.reset();
    std::system(("rm -rf " + dir_).c_str());
  }
  grpc::Status Get(const std::string& key, const std::string& id) {
    grpc::ClientContext c;
    c.AddMetadata("authorization", std::string("Bearer ") + key);
    c.set_deadline(std::chrono::system_clock::now() + 30s);
    v1::GetSessionRequest r;
    r.set_session_id(id);
    v1::SessionInfo info;
    return v1::Streamd::NewStub(d_->Channel())->GetSession(&c, r, &info);
  }
  std::vector<std::string> List(const std::string& key) {
    grpc::ClientContext c;
    c.AddMetadata("authorization", std::string("Bearer ") + key);
    c.set_deadline(std::chrono::system_clock::now() + 30s);
    v1::ListSessionsResponse out;
    EXPECT_TRUE(v1::Streamd::NewStub(d_->Channel())->ListSessions(&c, {}, &out).ok());
    std::vector<std::string> ids;
    for (const auto& s : out.sessions()) ids.push_back(s.session_id());
    return ids;
  }
  // Resume as `key`: the Error, or nullopt when it was Opened (the session is then detached
  // again).
  std::optional<v1::Error> ResumeAs(const std::string& key, const std::string& id) {
    RawStream s(d_->Channel(), 30s, key, id);
    s.Write(ResumeMsg(id));
    auto m = s.Read();
    if (m && m->has_opened()) {
      s.WritesDone();
      EXPECT_TRUE(s.Finish().ok());
      return std::nullopt;
    }
    if (!m || !m->has_error()) {
      ADD_FAILURE() << "expected Opened or Error, got "
                    << (m ? m->ShortDebugString() : std::string("end of stream"));
      return v1::Error();
    }
    s.Cancel();
    return m->error();
  }
  static std::string Fork(RawStream& s, const std::string& request_id, v1::Error* error) {
    EXPECT_TRUE(s.Write(ForkMsg(request_id)));
    auto m = s.Read();
    if (m && m->has_forked()) return m->forked().session_id();
    if (m && m->has_error()) *error = m->error();
    return "";
  }

  std::string dir_;
  std::unique_ptr<DaemonProcess> d_;
};

TEST_F(RollbackTenantE2eTest, AForkIsItsTenantsAndDoesNotExistForAnother) {
  RawStream acme(d_->Channel(), 60s, kAcme);
  const auto opened = acme.Open();
  ASSERT_TRUE(opened);
  ASSERT_FALSE(acme.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  v1::Error error;
  const std::string fork = Fork(acme, "f", &error);
  ASSERT_TRUE(IsSessionId(fork)) << error.ShortDebugString();
  const std::vector<std::string> listed = List(kAcme);
  EXPECT_EQ(std::count(listed.begin(), listed.end(), fork), 1);
  EXPECT_EQ(std::count(listed.begin(), listed.end(), opened->session_id()), 1);
  // globex: neither the fork nor its parent exists, and a made-up id reads the same.
  EXPECT_TRUE(List(kGlobex).empty());
  const std::string unknown = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(Get(kGlobex, fork).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Get(kGlobex, opened->session_id()).error_code(), grpc::StatusCode::NOT_FOUND);
  const std::optional<v1::Error> theirs = ResumeAs(kGlobex, fork);
  const std::optional<v1::Error> nobodys = ResumeAs(kGlobex, unknown);
  ASSERT_TRUE(theirs && nobodys);
  EXPECT_EQ(theirs->code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(theirs->field(), "resume.session_id");
  std::string masked = theirs->message();
  for (size_t at = masked.find(fork); at != std::string::npos; at = masked.find(fork)) {
    masked.replace(at, fork.size(), unknown);
  }
  EXPECT_EQ(masked, nobodys->message()) << "another tenant's fork must read as nonexistent";
  // Its own tenant resumes it.
  EXPECT_FALSE(ResumeAs(kAcme, fork));
  CloseStream(acme);
}

TEST_F(RollbackTenantE2eTest, AForkCountsAgainstItsTenantsSessionQuota) {
  RawStream globex(d_->Channel(), 60s, kGlobex);
  ASSERT_TRUE(globex.Open());
  ASSERT_FALSE(globex.Append(TextMsg(kRiversQuestion, v1::CHAT_ROLE_USER).append()));
  v1::Error error;
  const std::string first = Fork(globex, "f1", &error);
  ASSERT_TRUE(IsSessionId(first)) << error.ShortDebugString();
  const std::string second = Fork(globex, "f2", &error);  // a third session: over max_sessions
  EXPECT_TRUE(second.empty());
  EXPECT_EQ(error.code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(error.field(), "fork") << error.message();
  EXPECT_NE(error.message().find("max_sessions = 2"), std::string::npos) << error.message();
  EXPECT_EQ(error.request_id(), "f2");
  EXPECT_EQ(List(kGlobex).size(), 2u);
  GenerateExactly(globex, 3, "still-serving");
  CloseStream(globex);
}

// Two streams of a tenant at max_sessions 3, two sessions open, fork at the same moment: one
// fork fits the quota, and only one is made.
TEST_F(RollbackTenantE2eTest, ForksThatRaceForTheLastSessionOfAQuotaGetOneOfThem) {
  RawStream one(d_->Channel(), 60s, kInitech);
  RawStream two(d_->Channel(), 60s, kInitech);
  ASSERT_TRUE(one.Open());
  ASSERT_TRUE(two.Open());
  ASSERT_TRUE(one.Write(ForkMsg("a")));
  ASSERT_TRUE(two.Write(ForkMsg("b")));
  int forked = 0, refused = 0;
  for (RawStream* s : {&one, &two}) {
    auto m = s->Read();
    ASSERT_TRUE(m) << "the stream ended";
    if (m->has_forked()) {
      ++forked;
    } else if (m->has_error()) {
      ++refused;
      EXPECT_EQ(m->error().code(), static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
      EXPECT_NE(m->error().message().find("max_sessions = 3"), std::string::npos)
          << m->error().message();
    } else {
      ADD_FAILURE() << m->ShortDebugString();
    }
  }
  EXPECT_EQ(forked, 1);
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(List(kInitech).size(), 3u);
  CloseStream(one);
  CloseStream(two);
}

}  // namespace
}  // namespace streamd::e2e
