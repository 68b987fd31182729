// End-to-end: TLS and mTLS on the gRPC port (docs/SECURITY.md). The certificates are made for
// each run by the openssl CLI (tests/certs): a CA with a server certificate (SAN DNS:localhost,
// IP:127.0.0.1) and a client certificate, an unrelated CA with a client certificate of its own,
// and a third CA whose server certificate replaces the first one while the daemon runs.
//
// Every check that something fails has a twin that succeeds with one thing changed (the CA, the
// client certificate, the protocol version), so a test cannot pass by everything failing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/certs/test_certs.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/e2e_util.h"

namespace streamd::e2e {
namespace {

using streamd::testing::LeafKind;
using streamd::testing::TestCerts;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Copies `from` over `to` the way an operator should: a new file renamed into place, so the
// daemon's watcher never reads half a file.
void ReplaceFile(const std::string& from, const std::string& to) {
  const std::string tmp = to + ".new";
  std::filesystem::copy_file(from, tmp, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::rename(tmp, to);
}

// Client credentials trusting the CA in `ca_file`, presenting `cert`/`key` when given.
std::shared_ptr<grpc::ChannelCredentials> Trusting(const std::string& ca_file,
                                                   const std::string& cert = "",
                                                   const std::string& key = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadAll(ca_file);
  if (!cert.empty()) {
    o.pem_cert_chain = ReadAll(cert);
    o.pem_private_key = ReadAll(key);
  }
  return grpc::SslCredentials(o);
}

// GetModelInfo on `channel`: a failed handshake is UNAVAILABLE at once (no wait_for_ready);
// the deadline only bounds a daemon that stopped answering.
grpc::Status ModelInfo(const std::shared_ptr<grpc::Channel>& channel, v1::ModelInfo* info) {
  auto stub = v1::Streamd::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return stub->GetModelInfo(&ctx, {}, info);
}

// Appends a prompt and generates `n` greedy tokens on an open stream.
Generation Turn(RawStream& s, const std::string& text, int32_t n) {
  EXPECT_FALSE(s.Append(TextMsg(text).append()));
  EXPECT_TRUE(s.Write(GenerateMsg(n)));
  return ReadGeneration(s);
}

class TlsE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/streamd_tls_e2e_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    certs_ = new TestCerts(tmpl);
    for (const char* ca : {"ca", "other_ca", "new_ca"}) {
      const Status s = certs_->MakeCa(ca);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    struct Leaf {
      const char* name;
      const char* ca;
      LeafKind kind;
    };
    for (const Leaf& leaf :
         {Leaf{"server", "ca", LeafKind::kServer}, Leaf{"client", "ca", LeafKind::kClient},
          Leaf{"other_client", "other_ca", LeafKind::kClient},
          Leaf{"new_server", "new_ca", LeafKind::kServer}}) {
      const Status s = certs_->MakeLeaf(leaf.name, leaf.ca, leaf.kind);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  static void TearDownTestSuite() {
    if (certs_ == nullptr) return;
    std::error_code ignored;
    std::filesystem::remove_all(certs_->dir(), ignored);
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(certs_, nullptr) << "no test certificates"; }

  // Overrides that serve TLS with the server certificate of "ca".
  static std::vector<std::string> TlsFlags() {
    return {"--server.tls.cert_file=" + certs_->Cert("server"),
            "--server.tls.key_file=" + certs_->Key("server")};
  }

  inline static TestCerts* certs_ = nullptr;
};

TEST_F(TlsE2eTest, TlsServesUnaryCallsAndSessionStreams) {
  auto d = DaemonProcess::Start(TlsFlags());
  ASSERT_NE(d, nullptr);
  auto channel = d->Channel(Trusting(certs_->Cert("ca")));
  v1::ModelInfo info;
  const grpc::Status status = ModelInfo(channel, &info);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(info.vocab_size(), 49152);
  RawStream s(channel, std::chrono::seconds(60));
  ASSERT_TRUE(s.Open());
  const Generation g = Turn(s, "Once upon a time", 4);
  EXPECT_TRUE(g.ended);
  EXPECT_EQ(g.ids.size(), 4u);
  s.WritesDone();
  EXPECT_TRUE(s.Finish().ok());
  // The name checked is the address's: IP:127.0.0.1 is in the certificate, DNS:localhost too.
  grpc::ChannelArguments by_name;
  by_name.SetSslTargetNameOverride("localhost");
  EXPECT_TRUE(ModelInfo(d->Channel(Trusting(certs_->Cert("ca")), by_name), &info).ok());
  grpc::ChannelArguments wrong_name;
  wrong_name.SetSslTargetNameOverride("elsewhere.example");
  EXPECT_FALSE(ModelInfo(d->Channel(Trusting(certs_->Cert("ca")), wrong_name), &info).ok());
}

TEST_F(TlsE2eTest, PlaintextAndUntrustingClientsAreRefused) {
  auto d = DaemonProcess::Start(TlsFlags());
  ASSERT_NE(d, nullptr);
  v1::ModelInfo info;
  const grpc::Status plain = ModelInfo(d->Channel(grpc::InsecureChannelCredentials()), &info);
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // A client that trusts another CA refuses the server's certificate.
  const grpc::Status untrusted = ModelInfo(d->Channel(Trusting(certs_->Cert("other_ca"))), &info);
  EXPECT_EQ(untrusted.error_code(), grpc::StatusCode::UNAVAILABLE) << untrusted.error_message();
  EXPECT_TRUE(ModelInfo(d->Channel(Trusting(certs_->Cert("ca"))), &info).ok());
}

// `openssl s_client` limited to one protocol version; its output says what was negotiated.
std::string Handshake(int port, const std::string& version, const std::string& ca) {
  // SECLEVEL=0: OpenSSL 3 would otherwise not even offer TLS 1.1, and the test would only
  // show that the client refused. </dev/null: end the session after the handshake.
  const std::string command = "openssl s_client -connect 127.0.0.1:" + std::to_string(port) + " -" +
                              version + " -cipher DEFAULT@SECLEVEL=0 -CAfile " + ca +
                              " -alpn h2 </dev/null 2>&1";
  const RunResult r = RunProgram({"/bin/sh", "-c", command});
  return r.out + r.err;
}

TEST_F(TlsE2eTest, OnlyTls12AndNewerAreAccepted) {
  auto d = DaemonProcess::Start(TlsFlags());
  ASSERT_NE(d, nullptr);
  const std::string ca = certs_->Cert("ca");
  EXPECT_THAT(Handshake(d->port(), "tls1_2", ca), HasSubstr("New, TLSv1.2, Cipher is"));
  EXPECT_THAT(Handshake(d->port(), "tls1_3", ca), HasSubstr("New, TLSv1.3, Cipher is"));
  for (const char* old : {"tls1_1", "tls1"}) {
    const std::string out = Handshake(d->port(), old, ca);
    EXPECT_THAT(out, HasSubstr("Cipher is (NONE)")) << old << ":\n" << out;
    // The client did offer it (a ClientHello was written) and the server answered nothing.
    EXPECT_THAT(out, ::testing::ContainsRegex("handshake has read 0 bytes and written [1-9]"))
        << old << ":\n"
        << out;
  }
}

TEST_F(TlsE2eTest, MutualTlsRequiresAClientCertificateOfTheClientCa) {
  std::vector<std::string> flags = TlsFlags();
  flags.push_back("--server.tls.client_ca_file=" + certs_->Cert("ca"));
  auto d = DaemonProcess::Start(flags);
  ASSERT_NE(d, nullptr);
  const std::string ca = certs_->Cert("ca");
  v1::ModelInfo info;
  const grpc::Status none = ModelInfo(d->Channel(Trusting(ca)), &info);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAVAILABLE) << none.error_message();
  const grpc::Status other = ModelInfo(
      d->Channel(Trusting(ca, certs_->Cert("other_client"), certs_->Key("other_client"))), &info);
  EXPECT_EQ(other.error_code(), grpc::StatusCode::UNAVAILABLE) << other.error_message();
  auto channel = d->Channel(Trusting(ca, certs_->Cert("client"), certs_->Key("client")));
  const grpc::Status good = ModelInfo(channel, &info);
  EXPECT_TRUE(good.ok()) << good.error_message();
  RawStream s(channel, std::chrono::seconds(60));
  ASSERT_TRUE(s.Open());
  EXPECT_EQ(Turn(s, "Hello", 2).ids.size(), 2u);
}

TEST_F(TlsE2eTest, CertificatesReloadWithoutDroppingStreams) {
  // The daemon reads copies that the test replaces.
  const std::string cert = certs_->dir() + "/live.pem", key = certs_->dir() + "/live.key";
  std::filesystem::copy_file(certs_->Cert("server"), cert,
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(certs_->Key("server"), key,
                             std::filesystem::copy_options::overwrite_existing);
  auto d = DaemonProcess::Start({"--server.tls.cert_file=" + cert, "--server.tls.key_file=" + key,
                                 "--server.tls.reload_interval=1s"});
  ASSERT_NE(d, nullptr);
  const std::string old_ca = certs_->Cert("ca"), new_ca = certs_->Cert("new_ca");
  RawStream s(d->Channel(Trusting(old_ca)), std::chrono::seconds(60));
  ASSERT_TRUE(s.Open());
  const Generation before = Turn(s, "Once upon a time", 3);
  ASSERT_EQ(before.ids.size(), 3u);
  v1::ModelInfo info;
  ASSERT_FALSE(ModelInfo(d->Channel(Trusting(new_ca)), &info).ok()) << "new CA trusted too soon";

  ReplaceFile(certs_->Key("new_server"), key);
  ReplaceFile(certs_->Cert("new_server"), cert);
  // The watcher reads the files once a second; new handshakes then present the new pair.
  bool reloaded = false;
  // 30 s: far above the 1 s interval, for a machine busy with other tests.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !reloaded && std::chrono::steady_clock::now() < until;) {
    reloaded = ModelInfo(d->Channel(Trusting(new_ca)), &info).ok();
    if (!reloaded) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(reloaded) << "no connection trusting the new CA within 30 s: " << d->Stderr();
  const grpc::Status stale = ModelInfo(d->Channel(Trusting(old_ca)), &info);
  EXPECT_EQ(stale.error_code(), grpc::StatusCode::UNAVAILABLE)
      << "a client trusting only the old CA still connects";
  // The stream opened before the change still works: its connection kept its keys.
  const Generation after = Turn(s, " and then", 3);
  EXPECT_TRUE(after.ended);
  EXPECT_EQ(after.ids.size(), 3u);
  s.WritesDone();
  EXPECT_TRUE(s.Finish().ok());
}

// Start-up errors come before the model loads: a missing model would be the error otherwise.
RunResult Serve(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"serve", "--model.path=/nonexistent/model.gguf",
                                   "--server.metrics_address=127.0.0.1:0",
                                   "--sessions.snapshot_dir="};
  args.insert(args.end(), flags.begin(), flags.end());
  return RunStreamd(args);
}

TEST_F(TlsE2eTest, UnusableFilesStopTheStartNamingTheKey) {
  const std::string missing = certs_->dir() + "/missing.key";
  RunResult r = Serve({"--server.listen_address=127.0.0.1:0",
                       "--server.tls.cert_file=" + certs_->Cert("server"),
                       "--server.tls.key_file=" + missing});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("server.tls.key_file = \"" + missing +
                               "\": cannot open: No such file or directory"));
  // A directory opens but does not read.
  r = Serve({"--server.listen_address=127.0.0.1:0", "--server.tls.cert_file=" + certs_->dir(),
             "--server.tls.key_file=" + certs_->Key("server")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("server.tls.cert_file = \"" + certs_->dir() + "\": cannot read"));
  const std::string garbage = certs_->dir() + "/garbage.pem";
  std::ofstream(garbage) << "not a certificate\n";
  r = Serve({"--server.listen_address=127.0.0.1:0", "--server.tls.cert_file=" + garbage,
             "--server.tls.key_file=" + certs_->Key("server")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("server.tls.cert_file = \"" + garbage + "\" holds no PEM"));
  r = Serve({"--server.listen_address=127.0.0.1:0",
             "--server.tls.cert_file=" + certs_->Cert("server"),
             "--server.tls.key_file=" + certs_->Key("client")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("is not the private key of the certificate"));
  r = Serve(
      {"--server.listen_address=127.0.0.1:0", "--server.tls.cert_file=" + certs_->Cert("server")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("server.tls.cert_file is set but server.tls.key_file is not"));
  // Good files get past these checks to the model, which this run lacks.
  r = Serve({"--server.listen_address=127.0.0.1:0",
             "--server.tls.cert_file=" + certs_->Cert("server"),
             "--server.tls.key_file=" + certs_->Key("server")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/model.gguf"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("server.tls")));
}

TEST_F(TlsE2eTest, NetworkAddressNeedsClientAuthenticationOrAnOptIn) {
  RunResult r = Serve({"--server.listen_address=0.0.0.0:0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("server.listen_address = 0.0.0.0:0 is not a loopback address"));
  EXPECT_THAT(r.err, HasSubstr("auth.allow_insecure: true"));
  // Server-only TLS does not authenticate clients either.
  std::vector<std::string> tls = TlsFlags();
  tls.push_back("--server.listen_address=[::]:0");
  r = Serve(tls);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("TLS is on but does not authenticate clients"));
  // The opt-in, and mTLS, start; both serve on 127.0.0.1 through the wildcard.
  auto insecure =
      DaemonProcess::Start({"--server.listen_address=0.0.0.0:0", "--auth.allow_insecure=true"});
  ASSERT_NE(insecure, nullptr);
  v1::ModelInfo info;
  EXPECT_TRUE(ModelInfo(insecure->Channel(), &info).ok());
  insecure.reset();
  std::vector<std::string> mtls = TlsFlags();
  mtls.push_back("--server.tls.client_ca_file=" + certs_->Cert("ca"));
  mtls.push_back("--server.listen_address=0.0.0.0:0");
  auto d = DaemonProcess::Start(mtls);
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE(ModelInfo(d->Channel(Trusting(certs_->Cert("ca"), certs_->Cert("client"),
                                            certs_->Key("client"))),
                        &info)
                  .ok());
}

}  // namespace
}  // namespace streamd::e2e
