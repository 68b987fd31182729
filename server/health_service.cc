#include "server/health_service.h"

#include <utility>
#include <vector>

#include "server/grpc_status.h"
#include "server/refused_reactor.h"

namespace streamd::server {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

}  // namespace

// One Watch stream. Its state is guarded by the service's mutex; what it decides under it
// (a write, the finish) is started after the mutex is released (Act).
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  enum class Action { kNone, kWrite, kFinish };

  Watcher(HealthService* owner, std::string name) : owner_(owner), name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  // mu_ held: the name's status is now `status`.
  Action Update(ServingStatus status) {
    latest_ = status;
    return Next();
  }
  // mu_ held: the service shut down; the stream ends after its last write.
  Action End() { return Next(); }
  // Without mu_.
  void Act(Action action) {
    if (action == Action::kWrite) StartWrite(&response_);
    if (action == Action::kFinish) Finish(final_);
  }

  void OnWriteDone(bool ok) override {
    Action action;
    {
      std::lock_guard<std::mutex> lock(owner_->mu_);
      writing_ = false;
      if (!ok) cancelled_ = true;  // the client is gone
      action = Next();
    }
    Act(action);
  }
  void OnCancel() override {
    Action action;
    {
      std::lock_guard<std::mutex> lock(owner_->mu_);
      cancelled_ = true;
      action = Next();
    }
    Act(action);
  }
  void OnDone() override {
    owner_->Remove(this);
    delete this;
  }

 private:
  // mu_ held: what to do now. One write in flight at a time; the latest status wins.
  Action Next() {
    if (finished_ || writing_) return Action::kNone;
    if (cancelled_) {
      finished_ = true;
      final_ = grpc::Status::CANCELLED;
      return Action::kFinish;
    }
    if (!sent_any_ || latest_ != response_.status()) {
      response_.set_status(latest_);
      sent_any_ = true;
      writing_ = true;
      return Action::kWrite;
    }
    if (owner_->shut_down_) {
      finished_ = true;
      final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "streamd is shutting down");
      return Action::kFinish;
    }
    return Action::kNone;
  }

  HealthService* const owner_;
  const std::string name_;
  // Guarded by the owner's mu_.
  HealthCheckResponse response_;  // the write in flight: unchanged until OnWriteDone
  ServingStatus latest_ = HealthCheckResponse::SERVICE_UNKNOWN;
  bool sent_any_ = false;
  bool writing_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
  grpc::Status final_;
};

HealthService::HealthService(KeyGate gate) : gate_(gate) {
  statuses_[""] = HealthCheckResponse::SERVING;
}

HealthService::~HealthService() = default;

HealthService::ServingStatus HealthService::StatusOf(const std::string& name) const {
  auto it = statuses_.find(name);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

void HealthService::Set(std::unique_lock<std::mutex>& lock, const std::string& name,
                        ServingStatus status) {
  std::vector<std::pair<Watcher*, Watcher::Action>> actions;
  statuses_[name] = status;
  for (Watcher* w : watchers_) {
    if (w->name() == name) actions.emplace_back(w, w->Update(status));
  }
  lock.unlock();
  // A watcher with a write or a finish pending cannot be done (and deleted) before it.
  for (auto& [w, action] : actions) w->Act(action);
}

void HealthService::SetServingStatus(const std::string& service_name, bool serving) {
  std::unique_lock<std::mutex> lock(mu_);
  if (shut_down_) return;
  Set(lock, service_name,
      serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING);
}

void HealthService::SetServingStatus(bool serving) {
  std::unique_lock<std::mutex> lock(mu_);
  if (shut_down_) return;
  std::vector<std::string> names;
  for (const auto& [name, status] : statuses_) names.push_back(name);
  lock.unlock();
  for (const std::string& name : names) SetServingStatus(name, serving);
}

void HealthService::Shutdown() {
  SetServingStatus(false);
  std::vector<std::pair<Watcher*, Watcher::Action>> actions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shut_down_ = true;
    for (Watcher* w : watchers_) actions.emplace_back(w, w->End());
  }
  for (auto& [w, action] : actions) w->Act(action);
}

void HealthService::Remove(Watcher* watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(watcher);
}

size_t HealthService::watchers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watchers_.size();
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (Status admitted = gate_.Admit(*context); !admitted.ok()) {
    reactor->Finish(ToGrpcStatus(admitted));
    return reactor;
  }
  ServingStatus status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    status = StatusOf(request->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                 "health: unknown service \"" + request->service() + "\""));
    return reactor;
  }
  response->set_status(status);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  if (Status admitted = gate_.Admit(*context); !admitted.ok()) {
    return Refuse<grpc::ServerWriteReactor<HealthCheckResponse>>(admitted, nullptr);
  }
  auto* watcher = new Watcher(this, request->service());
  Watcher::Action action;
  {
    std::lock_guard<std::mutex> lock(mu_);
    watchers_.insert(watcher);
    action = watcher->Update(StatusOf(request->service()));  // the first write
  }
  watcher->Act(action);
  return watcher;
}

}  // namespace streamd::server
