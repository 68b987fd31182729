#include "engine/sessions/session_storage.h"

#include <utility>

namespace streamd {

StatusOr<std::unique_ptr<SessionPersister>> OpenSessionStorage(
    Engine& engine, const std::string& root, const SnapshotContext& context,
    PersisterOptions options, PersisterHooks hooks, ModelDirMigration* migration) {
  STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<SnapshotStore> store,
                           OpenModelSnapshotStore(root, context, migration));
  return std::make_unique<SessionPersister>(engine, std::move(store), context, options,
                                            std::move(hooks));
}

}  // namespace streamd
