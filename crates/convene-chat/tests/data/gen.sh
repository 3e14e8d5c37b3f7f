#!/bin/sh
# Regenerates the wss test certificates (run once; the output is committed).
# A test CA and two server certificates it signed, EC P-256, valid for 100 years:
#   server.pem       localhost, 127.0.0.1, ::1
#   wrong-name.pem   wrong-name.invalid only (for the name-mismatch test)
set -eu
cd "$(dirname "$0")"
days=36500
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out "$tmp/ca.key"
openssl req -x509 -new -key "$tmp/ca.key" -sha256 -days $days -subj "/CN=Convene cowchat test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  -out ca.pem
for name in server wrong-name; do
  case $name in
    server) san="DNS:localhost,IP:127.0.0.1,IP:::1"; cn=localhost ;;
    wrong-name) san="DNS:wrong-name.invalid"; cn=wrong-name.invalid ;;
  esac
  openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$tmp/$name.csr"
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$san" > "$tmp/$name.ext"
  openssl x509 -req -in "$tmp/$name.csr" -CA ca.pem -CAkey "$tmp/ca.key" -CAcreateserial \
    -CAserial "$tmp/ca.srl" -sha256 -days $days -extfile "$tmp/$name.ext" -out "$name.pem"
done
# The CA key is thrown away: nothing else can be signed by this CA.
