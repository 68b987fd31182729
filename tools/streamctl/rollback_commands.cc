// `streamctl sessions truncate ID --keep N` and `streamctl sessions fork ID`: both resume the
// (detached) session on a stream of their own, send one Truncate or Fork, and detach again, so
// the session stays resumable as it was, less the dropped tail or plus a fork.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/util/session_id.h"
#include "tools/streamctl/commands.h"
#include "tools/streamctl/session_client.h"

namespace streamd::streamctl {
namespace {

nlohmann::json CacheJson(const v1::CacheState& c) {
  return {{"tokens_seen", c.tokens_seen()},
          {"tokens_cached", c.tokens_cached()},
          {"tokens_evicted", c.tokens_evicted()},
          {"pending_tokens", c.pending_tokens()},
          {"blocks_held", c.blocks_held()}};
}

// `sessions ACTION --help`: the help needs no session id.
bool HelpFirst(int argc, char** argv) {
  return argc > 3 && (std::strcmp(argv[3], "--help") == 0 || std::strcmp(argv[3], "-h") == 0);
}

// The session id that follows `sessions ACTION`, checked before any call.
StatusOr<SessionId> IdArgument(int argc, char** argv, const std::string& action) {
  if (HelpFirst(argc, argv)) return SessionId();
  if (argc <= 3 || argv[3][0] == '-') {
    return InvalidArgumentError("sessions " + action + " needs a session id");
  }
  return SessionId::Parse(argv[3], "sessions " + action);
}

}  // namespace

int TruncateCommand(int argc, char** argv) {
  auto id = IdArgument(argc, argv, "truncate");
  if (!id.ok()) return Fail(id.status());
  CommonFlags common;
  std::string request_id;
  int64_t keep = -1;
  tools::FlagParser flags(
      "streamctl sessions truncate ID --keep N [--request-id R] [--json]\n"
      "Keeps the first N output tokens of the session's last generation (request id R, the\n"
      "--request-id it was generated with; default \"\") and drops the rest from its context.\n"
      "The session must be detached; it stays so.");
  common.Register(flags);
  flags.Int("keep", &keep, 0, INT32_MAX,
            "output tokens of the generation that stay; required (-1: not given)");
  flags.String("request-id", &request_id, "the request id of the session's last generation");
  if (Status s = flags.Parse(argc, argv, HelpFirst(argc, argv) ? 3 : 4); !s.ok()) {
    return Fail(s);
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (!flags.was_set("keep")) return Fail(InvalidArgumentError("--keep is required"));
  auto channel = common.Connect();
  if (!channel.ok()) return Fail(channel.status());
  SessionClient client(*channel, id->ToString());
  // Another tenant's session is NOT_FOUND, exactly as one that does not exist.
  if (auto opened = client.Resume(id->ToString()); !opened.ok()) return Fail(opened.status());
  v1::Truncate truncate;
  truncate.set_request_id(request_id);
  truncate.set_keep_tokens(static_cast<int32_t>(keep));
  const StatusOr<v1::CacheState> state = client.Truncate(truncate);
  const Status end = client.Detach();
  if (!state.ok()) return Fail(state.status());
  if (!end.ok()) return Fail(end);
  if (common.json) {
    nlohmann::json j = {
        {"session_id", id->ToString()}, {"request_id", request_id}, {"keep_tokens", keep}};
    j.update(CacheJson(*state));
    std::cout << j.dump() << "\n";
  } else {
    std::printf("truncated session %s: generation \"%s\" keeps %lld tokens; tokens_seen %lld\n",
                id->ToString().c_str(), request_id.c_str(), static_cast<long long>(keep),
                static_cast<long long>(state->tokens_seen()));
  }
  return 0;
}

int ForkCommand(int argc, char** argv) {
  auto id = IdArgument(argc, argv, "fork");
  if (!id.ok()) return Fail(id.status());
  CommonFlags common;
  std::string request_id;
  tools::FlagParser flags(
      "streamctl sessions fork ID [--request-id R] [--json]\n"
      "Creates a new session with a copy of ID's context, settings and pending input (copy-on-\n"
      "write: it costs memory as it diverges) and prints its id; both are left detached. The\n"
      "session must be detached and not generating.");
  common.Register(flags);
  flags.String("request-id", &request_id, "echoed in the answer (printable ASCII)");
  if (Status s = flags.Parse(argc, argv, HelpFirst(argc, argv) ? 3 : 4); !s.ok()) {
    return Fail(s);
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  auto channel = common.Connect();
  if (!channel.ok()) return Fail(channel.status());
  SessionClient client(*channel, id->ToString());
  // Another tenant's session is NOT_FOUND, exactly as one that does not exist.
  if (auto opened = client.Resume(id->ToString()); !opened.ok()) return Fail(opened.status());
  v1::Fork fork;
  fork.set_request_id(request_id);
  const StatusOr<v1::Forked> forked = client.Fork(fork);
  const Status end = client.Detach();
  if (!forked.ok()) return Fail(forked.status());
  if (!end.ok()) return Fail(end);
  if (common.json) {
    nlohmann::json j = {{"session_id", forked->session_id()},
                        {"forked_from", id->ToString()},
                        {"request_id", forked->request_id()}};
    j.update(CacheJson(forked->cache()));
    std::cout << j.dump() << "\n";
  } else {
    std::printf("forked session %s: %s (tokens_seen %lld)\n", id->ToString().c_str(),
                forked->session_id().c_str(),
                static_cast<long long>(forked->cache().tokens_seen()));
  }
  return 0;
}

}  // namespace streamd::streamctl
