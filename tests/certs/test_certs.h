// Certificates for tests, made by the openssl CLI into a directory the test owns: CAs, server
// certificates (SAN DNS:localhost and IP:127.0.0.1) and client certificates signed by them.
// EC P-256 keys, unencrypted PEM, valid from now for a day (CAs two). Nothing is cached: every
// test run makes its own, so no test depends on a key checked into the tree.
#pragma once

#include <string>
#include <vector>

#include "engine/util/status.h"

namespace streamd::testing {

enum class LeafKind { kServer, kClient };

class TestCerts {
 public:
  // Files go to `dir` (which must exist) as NAME.pem (certificate) and NAME.key (key).
  explicit TestCerts(std::string dir) : dir_(std::move(dir)) {}

  // A self-signed CA called `name`.
  Status MakeCa(const std::string& name);
  // A certificate called `name` for a server or a client, signed by the CA `ca`. A server's
  // also names each of `dns_names` (a deployment's own name: "streamd").
  Status MakeLeaf(const std::string& name, const std::string& ca, LeafKind kind,
                  const std::vector<std::string>& dns_names = {});

  std::string Cert(const std::string& name) const { return dir_ + "/" + name + ".pem"; }
  std::string Key(const std::string& name) const { return dir_ + "/" + name + ".key"; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Runs `openssl args...` (found on $PATH) and waits; an error holds its exit code and stderr.
Status RunOpenssl(const std::vector<std::string>& args);

}  // namespace streamd::testing
