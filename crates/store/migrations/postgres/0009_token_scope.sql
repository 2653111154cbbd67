-- Tokens good for one app only (issue 40), as SQLite's 0021_token_scope.sql.
ALTER TABLE api_tokens ADD COLUMN scope TEXT;
