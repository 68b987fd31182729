// SessionStream's quota checks (a member of session_stream.h each): what the caller's tenant may
// still open, append and generate under auth.keys_file's quotas. Callers without keys (auth off,
// or an anonymous caller) have none.
#include <string>

#include "server/session_stream.h"

namespace streamd::server {

Status SessionStream::CheckSessionQuota(const SessionOptions& options,
                                        std::string_view what) const {
  if (ctx_.auth == nullptr || !caller_.authenticated) return OkStatus();
  return CheckOpenQuota(ctx_.registry, ctx_.engine.config(), ctx_.model.context_length, options,
                        ctx_.auth->SessionQuotasOf(options.tenant), what);
}

Status SessionStream::CheckTokenQuota(const std::string& what) const {
  if (ctx_.auth == nullptr || ctx_.budget == nullptr || !caller_.authenticated) return OkStatus();
  return ctx_.budget->Check(caller_.tenant, ctx_.auth->QuotasOf(caller_.tenant).tokens_per_second,
                            what);
}

void SessionStream::ChargeTokens(int64_t tokens) const {
  if (ctx_.auth == nullptr || ctx_.budget == nullptr || !caller_.authenticated) return;
  ctx_.budget->Charge(caller_.tenant, ctx_.auth->QuotasOf(caller_.tenant).tokens_per_second,
                      tokens);
}

Status SessionStream::CheckGenerationQuota() const {
  if (ctx_.auth == nullptr || !caller_.authenticated) return OkStatus();
  return streamd::CheckGenerationQuota(ctx_.registry, caller_.tenant,
                                       ctx_.auth->SessionQuotasOf(caller_.tenant));
}

}  // namespace streamd::server
