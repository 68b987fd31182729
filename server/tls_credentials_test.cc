#include "server/tls_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "tests/certs/test_certs.h"

namespace streamd::server {
namespace {

using ::testing::HasSubstr;
using testing::LeafKind;
using ::testing::StartsWith;
using testing::TestCerts;

class TlsCredentialsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/streamd_tls_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    certs_ = new TestCerts(tmpl);
    for (const char* ca : {"ca", "other_ca"}) ASSERT_TRUE(certs_->MakeCa(ca).ok());
    ASSERT_TRUE(certs_->MakeLeaf("server", "ca", LeafKind::kServer).ok());
    ASSERT_TRUE(certs_->MakeLeaf("other", "other_ca", LeafKind::kServer).ok());
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    std::filesystem::remove_all(certs_->dir(), ignored);
    delete certs_;
  }
  void SetUp() override { ASSERT_NE(certs_, nullptr); }

  static TlsOptions Good() {
    TlsOptions t;
    t.cert_file = certs_->Cert("server");
    t.key_file = certs_->Key("server");
    return t;
  }
  static std::string Write(const std::string& name, const std::string& text) {
    const std::string path = certs_->dir() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  inline static TestCerts* certs_ = nullptr;
};

TEST_F(TlsCredentialsTest, OffNeedsNoFiles) {
  EXPECT_TRUE(CheckTlsFiles({}).ok());
  auto creds = MakeServerCredentials({});
  ASSERT_TRUE(creds.ok());
  EXPECT_NE(*creds, nullptr);
}

TEST_F(TlsCredentialsTest, GoodFilesMakeCredentials) {
  EXPECT_TRUE(CheckTlsFiles(Good()).ok()) << CheckTlsFiles(Good()).ToString();
  TlsOptions mtls = Good();
  mtls.client_ca_file = certs_->Cert("ca");
  EXPECT_TRUE(CheckTlsFiles(mtls).ok()) << CheckTlsFiles(mtls).ToString();
  auto creds = MakeServerCredentials(mtls);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_NE(*creds, nullptr);
}

TEST_F(TlsCredentialsTest, MissingFilesNameTheKeyAndThePath) {
  TlsOptions t = Good();
  t.key_file = certs_->dir() + "/missing.key";
  Status s = CheckTlsFiles(t);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "server.tls.key_file = \"" + t.key_file + "\": cannot open: No such file or directory");
  t = Good();
  t.cert_file = certs_->dir() + "/missing.pem";
  EXPECT_THAT(CheckTlsFiles(t).message(), StartsWith("server.tls.cert_file = \"" + t.cert_file));
  t = Good();
  t.client_ca_file = certs_->dir() + "/missing_ca.pem";
  EXPECT_THAT(CheckTlsFiles(t).message(),
              StartsWith("server.tls.client_ca_file = \"" + t.client_ca_file + "\": cannot open"));
  // MakeServerCredentials runs the same checks.
  EXPECT_EQ(MakeServerCredentials(t).status().code(), StatusCode::kNotFound);
}

TEST_F(TlsCredentialsTest, UnreadableAndUnparseableFilesAreRefused) {
  TlsOptions t = Good();
  t.cert_file = certs_->dir();  // a directory opens but cannot be read
  EXPECT_THAT(CheckTlsFiles(t).message(),
              StartsWith("server.tls.cert_file = \"" + t.cert_file + "\": cannot read"));
  t.cert_file = Write("garbage.pem", "not a certificate\n");
  EXPECT_THAT(CheckTlsFiles(t).message(), HasSubstr("holds no PEM certificate"));
  t.cert_file =
      Write("damaged.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  EXPECT_THAT(CheckTlsFiles(t).message(), HasSubstr("certificate 1 does not parse"));
  t = Good();
  t.key_file = certs_->Cert("server");  // a certificate is not a key
  EXPECT_THAT(CheckTlsFiles(t).message(), StartsWith("server.tls.key_file = \"" + t.key_file +
                                                     "\" holds no unencrypted PEM private key"));
  t = Good();
  t.client_ca_file = Write("empty_ca.pem", "");
  EXPECT_THAT(CheckTlsFiles(t).message(),
              StartsWith("server.tls.client_ca_file = \"" + t.client_ca_file +
                         "\" holds no PEM certificate"));
}

TEST_F(TlsCredentialsTest, EncryptedKeyIsRefusedWithoutPrompting) {
  const std::string encrypted = certs_->dir() + "/encrypted.key";
  ASSERT_TRUE(testing::RunOpenssl({"pkey", "-in", certs_->Key("server"), "-aes256", "-passout",
                                   "pass:secret", "-out", encrypted})
                  .ok());
  TlsOptions t = Good();
  t.key_file = encrypted;
  EXPECT_THAT(CheckTlsFiles(t).message(), HasSubstr("holds no unencrypted PEM private key"));
}

TEST_F(TlsCredentialsTest, KeyOfAnotherCertificateIsRefused) {
  TlsOptions t = Good();
  t.key_file = certs_->Key("other");
  EXPECT_EQ(CheckTlsFiles(t).message(),
            "server.tls.key_file = \"" + t.key_file +
                "\" is not the private key of the certificate in server.tls.cert_file = \"" +
                t.cert_file + "\" (/CN=localhost)");
}

TEST_F(TlsCredentialsTest, ExpiredCertificateIsRefused) {
  // Re-signed with -days -1: its validity ends a day before it starts, so it has expired.
  const std::string cert = certs_->dir() + "/expired.pem";
  ASSERT_TRUE(testing::RunOpenssl({"x509", "-in", certs_->Cert("server"), "-signkey",
                                   certs_->Key("server"), "-days", "-1", "-out", cert})
                  .ok());
  TlsOptions t = Good();
  t.cert_file = cert;
  EXPECT_THAT(CheckTlsFiles(t).message(), HasSubstr("has expired"));
}

}  // namespace
}  // namespace streamd::server
