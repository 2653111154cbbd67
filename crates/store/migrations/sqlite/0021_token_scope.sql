-- Tokens good for one app only (issue 40): the session cookie that `berth open` starts holds a
-- token whose scope is the app's path (`/apps/<job>/<app>/`); the API refuses it. NULL: an
-- API token, as before.
ALTER TABLE api_tokens ADD COLUMN scope TEXT;
