-- Fair-share usage (issue 3): one row per user (`kind` = 'user') and project ('project'),
-- `value` in billing-seconds decayed to `at` (microseconds). The row ('clock', 'flush') records
-- when running jobs' usage was last added, so a restarted manager counts on from there.
CREATE TABLE usage (
    kind    TEXT    NOT NULL,
    name    TEXT    NOT NULL,
    value   DOUBLE PRECISION NOT NULL,
    at      BIGINT  NOT NULL,
    PRIMARY KEY (kind, name)
);
