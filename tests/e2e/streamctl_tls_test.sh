#!/usr/bin/env bash
# streamctl against a `streamd serve` with mTLS (port 0), certificates made here by openssl:
# --tls-ca with --tls-cert/--tls-key runs health, sessions list and generate; the same calls
# without a client certificate, with plaintext, or trusting another CA fail; bad TLS and
# API-key flags are refused with a message naming the flag, before any call.
# Usage: STREAMD_MODEL=PATH streamctl_tls_test.sh STREAMD_BINARY STREAMCTL_BINARY
# shellcheck source=streamctl_test_lib.sh
. "$(dirname "$0")/streamctl_test_lib.sh"
command -v openssl >/dev/null || { echo "FAIL: openssl is missing (apt-get install openssl)"; exit 1; }

# A CA and an unrelated one; a server certificate for 127.0.0.1 and a client one from the CA.
printf '[req]\ndistinguished_name = dn\n[dn]\n[ca]\nbasicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign\n' >"$tmp/req.cnf"
printf 'subjectAltName = DNS:localhost, IP:127.0.0.1\nextendedKeyUsage = serverAuth\n' >"$tmp/server.ext"
printf 'extendedKeyUsage = clientAuth\n' >"$tmp/client.ext"
newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
for ca in ca other; do
  openssl req -x509 "${newkey[@]}" -keyout "$tmp/$ca.key" -out "$tmp/$ca.pem" -days 1 \
    -subj "/CN=streamctl test $ca" -config "$tmp/req.cnf" -extensions ca 2>>"$tmp/openssl.log" ||
    { echo "FAIL: openssl: $(cat "$tmp/openssl.log")"; exit 1; }
done
for leaf in server client; do
  openssl req -new "${newkey[@]}" -keyout "$tmp/$leaf.key" -out "$tmp/$leaf.csr" \
    -subj "/CN=$leaf" -config "$tmp/req.cnf" 2>>"$tmp/openssl.log" &&
  openssl x509 -req -in "$tmp/$leaf.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" \
    -set_serial "$RANDOM$RANDOM" -days 1 -extfile "$tmp/$leaf.ext" -out "$tmp/$leaf.pem" \
    2>>"$tmp/openssl.log" || { echo "FAIL: openssl: $(cat "$tmp/openssl.log")"; exit 1; }
done

start_streamd --server.tls.cert_file="$tmp/server.pem" --server.tls.key_file="$tmp/server.key" \
  --server.tls.client_ca_file="$tmp/ca.pem" --sessions.snapshot_dir=
mtls=(--address "$addr" --tls-ca "$tmp/ca.pem" --tls-cert "$tmp/client.pem" --tls-key "$tmp/client.key")

[ "$("$streamctl" health "${mtls[@]}")" = "SERVING" ] || fail "health over mTLS is not SERVING"
out=$("$streamctl" sessions list --json "${mtls[@]}")
[ "$out" = '{"sessions":[]}' ] || fail "sessions list over mTLS: $out"
out=$("$streamctl" generate --prompt "Once upon a time" -n 3 --temperature 0 --json \
  --api-key test-key "${mtls[@]}" | tail -1)
echo "$out" | grep -q '"output_tokens":3' || fail "generate over mTLS with --api-key: $out"
out=$(STREAMD_API_KEY=env-key "$streamctl" health "${mtls[@]}")
[ "$out" = "SERVING" ] || fail "health with \$STREAMD_API_KEY: $out"
# The name checked can be another one the certificate holds.
out=$("$streamctl" health "${mtls[@]}" --tls-server-name localhost)
[ "$out" = "SERVING" ] || fail "--tls-server-name localhost: $out"

# Each of these changes one thing and fails.
if "$streamctl" health --address "$addr" --tls-ca "$tmp/ca.pem" 2>"$tmp/e" >/dev/null; then
  fail "health without a client certificate succeeded"
fi
grep -q "UNAVAILABLE" "$tmp/e" || fail "no client certificate: $(cat "$tmp/e")"
if "$streamctl" health --address "$addr" 2>"$tmp/e" >/dev/null; then
  fail "plaintext health against the TLS port succeeded"
fi
if "$streamctl" health "${mtls[@]}" --tls-ca "$tmp/other.pem" 2>"$tmp/e" >/dev/null; then
  fail "health trusting another CA succeeded"
fi
if "$streamctl" health "${mtls[@]}" --tls-server-name elsewhere.example 2>"$tmp/e" >/dev/null; then
  fail "--tls-server-name elsewhere.example succeeded"
fi
grep -q "elsewhere.example" "$tmp/e" || fail "wrong server name: $(cat "$tmp/e")"

# Flag errors, before any call: one line naming the flag, exit 1.
if "$streamctl" health --address "$addr" --tls-ca "$tmp/ca.pem" --tls-key "$tmp/client.key" \
  2>"$tmp/e"; then fail "--tls-key without --tls-cert succeeded"; fi
grep -q "INVALID_ARGUMENT: --tls-key needs --tls-cert" "$tmp/e" || fail "key only: $(cat "$tmp/e")"
if "$streamctl" health --address "$addr" --tls-ca "$tmp/nonexistent.pem" 2>"$tmp/e"; then
  fail "--tls-ca of a missing file succeeded"
fi
grep -q "NOT_FOUND: --tls-ca $tmp/nonexistent.pem: cannot open" "$tmp/e" ||
  fail "missing CA: $(cat "$tmp/e")"
if "$streamctl" health --address "$addr" --tls-ca "$tmp/ca.key" 2>"$tmp/e"; then
  fail "--tls-ca of a key file succeeded"
fi
grep -q "INVALID_ARGUMENT: --tls-ca $tmp/ca.key holds no PEM CERTIFICATE" "$tmp/e" ||
  fail "key as CA: $(cat "$tmp/e")"
if STREAMD_API_KEY=$'with\nnewline' "$streamctl" health "${mtls[@]}" 2>"$tmp/e"; then
  fail "an API key with a newline was sent"
fi
grep -q "INVALID_ARGUMENT: --api-key / \$STREAMD_API_KEY holds a character" "$tmp/e" ||
  fail "bad API key: $(cat "$tmp/e")"

stop_streamd
[ "$failed" -eq 0 ] && echo "streamctl_tls_test: all passed"
exit "$failed"
