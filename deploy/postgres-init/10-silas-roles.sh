#!/bin/sh
# Run once by the postgres image when it creates its cluster (compose.yaml).
# Creates the two roles of docs/operations.md#database-roles: silas_owner
# owns the database and runs migrations; silas_app is the gateway, which
# migrations grant only reading and appending the audit log. The passwords
# come from the compose secrets (SECRETS_DIR for a test outside compose).
set -eu
dir=${SECRETS_DIR:-/run/secrets}
owner_pw=$(cat "$dir/silas_owner_password")
app_pw=$(cat "$dir/silas_app_password")
psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
  -v owner_pw="$owner_pw" -v app_pw="$app_pw" -v db="${SILAS_DB:-silas}" <<'SQL'
CREATE ROLE silas_owner LOGIN PASSWORD :'owner_pw';
CREATE ROLE silas_app LOGIN PASSWORD :'app_pw';
CREATE DATABASE :"db" OWNER silas_owner;
\c :"db"
-- PostgreSQL 15 already does this; older versions let every role create tables.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
SQL
