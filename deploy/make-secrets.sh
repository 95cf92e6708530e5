#!/bin/sh
# Makes deploy/secrets/ for compose.yaml: random passwords for the database
# superuser, silas_owner and silas_app, and the two URLs Silas reads. Compose
# bind-mounts each file with its owner and mode, so each is made readable by
# exactly the container user that needs it (mode 0400): uid 10001 (the
# image's silas user) for the URLs, uid 999 (the postgres image's user) for
# the passwords. chown needs root: run it with sudo. Existing files are kept.
set -eu
cd "$(dirname "$0")"
SILAS_UID=${SILAS_UID:-10001}
PG_UID=${PG_UID:-999}
DB_HOST=${DB_HOST:-db:5432}
mkdir -p secrets
chmod 0755 secrets
rand() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
put() { # name owner content
  [ -e "secrets/$1" ] && return 0
  (umask 077 && printf '%s' "$3" > "secrets/$1")
  chown "$2" "secrets/$1"
  chmod 0400 "secrets/$1"
}
owner_pw=$( [ -e secrets/silas_owner_password ] && cat secrets/silas_owner_password || rand )
app_pw=$( [ -e secrets/silas_app_password ] && cat secrets/silas_app_password || rand )
put db_password "$PG_UID" "$(rand)"
put silas_owner_password "$PG_UID" "$owner_pw"
put silas_app_password "$PG_UID" "$app_pw"
put silas_owner_url "$SILAS_UID" "postgres://silas_owner:$owner_pw@$DB_HOST/silas?sslmode=disable"
put silas_app_url "$SILAS_UID" "postgres://silas_app:$app_pw@$DB_HOST/silas?sslmode=disable"
ls -ln secrets
