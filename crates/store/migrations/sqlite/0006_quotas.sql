-- Quotas (issue 6): limits per user or project (`kind`), as the JSON of berth_model::QuotaLimits.
CREATE TABLE quotas (
    kind        TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    limits      TEXT    NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (kind, name)
);
