-- projection runs (version 3)

-- table agent_runs
CREATE TABLE projections.agent_runs (
    run_id uuid NOT NULL,
    agent_type text,
    definition text,
    definition_ref text,
    digest text,
    model text,
    snapshot text,
    files_hash text,
    status text,
    exit_code integer,
    failure_phase text,
    failure_category text,
    failure_retryable boolean,
    timeout_seconds float8,
    budget_usd float8,
    requested_at timestamptz,
    started_at timestamptz,
    finished_at timestamptz,
    tokens_in bigint,
    tokens_out bigint,
    cost_usd float8,
    evaluation text,
    evaluation_version integer,
    case_key text,
    attempt integer,
    provenance text,
    PRIMARY KEY (run_id)
);
-- fold of run.requested, run.started, container.exited, run.finished into agent_runs
INSERT INTO projections.agent_runs AS t (run_id, agent_type, definition, definition_ref, digest, model, snapshot, files_hash, status, exit_code, failure_phase, failure_category, failure_retryable, timeout_seconds, budget_usd, requested_at, started_at, finished_at, tokens_in, tokens_out, cost_usd, evaluation, evaluation_version, case_key, attempt, provenance) SELECT run_id, agent_type, definition, definition_ref, digest, model, snapshot, files_hash, status, exit_code, failure_phase, failure_category, failure_retryable, timeout_seconds, budget_usd, requested_at, started_at, finished_at, tokens_in, tokens_out, cost_usd, evaluation, evaluation_version, case_key, attempt, provenance
  FROM (SELECT *
  FROM (SELECT run_id,
    projections.newest(agent_type) OVER w AS agent_type,
    projections.newest(definition) OVER w AS definition,
    projections.newest(definition_ref) OVER w AS definition_ref,
    projections.newest(digest) OVER w AS digest,
    projections.newest(model) OVER w AS model,
    projections.newest(snapshot) OVER w AS snapshot,
    projections.newest(files_hash) OVER w AS files_hash,
    projections.newest(status) OVER w AS status,
    projections.newest(exit_code) OVER w AS exit_code,
    projections.newest(failure_phase) OVER w AS failure_phase,
    projections.newest(failure_category) OVER w AS failure_category,
    projections.newest(failure_retryable) OVER w AS failure_retryable,
    projections.newest(timeout_seconds) OVER w AS timeout_seconds,
    projections.newest(budget_usd) OVER w AS budget_usd,
    projections.oldest(requested_at) OVER w AS requested_at,
    projections.oldest(started_at) OVER w AS started_at,
    projections.newest(finished_at) OVER w AS finished_at,
    projections.newest(tokens_in) OVER w AS tokens_in,
    projections.newest(tokens_out) OVER w AS tokens_out,
    projections.newest(cost_usd) OVER w AS cost_usd,
    projections.newest(evaluation) OVER w AS evaluation,
    projections.newest(evaluation_version) OVER w AS evaluation_version,
    projections.newest(case_key) OVER w AS case_key,
    projections.newest(attempt) OVER w AS attempt,
    projections.newest(provenance) OVER w AS provenance, row_number() OVER w AS one_per_key
  FROM (SELECT tx_id, global_position, 1 AS nth,
    CASE type WHEN 'run.requested' THEN (data->>'run_id')::uuid WHEN 'run.started' THEN (data->>'run_id')::uuid WHEN 'container.exited' THEN (data->>'run_id')::uuid WHEN 'run.finished' THEN (data->>'run_id')::uuid END AS run_id,
    CASE type WHEN 'run.requested' THEN (data->>'agent_type')::text END AS agent_type,
    CASE type WHEN 'run.requested' THEN (data->>'definition')::text END AS definition,
    CASE type WHEN 'run.requested' THEN (COALESCE(data->>'definition_ref', 'latest'))::text END AS definition_ref,
    CASE type WHEN 'run.started' THEN (data->>'digest')::text END AS digest,
    CASE type WHEN 'run.requested' THEN (data->>'model')::text END AS model,
    CASE type WHEN 'run.requested' THEN (data->'example'->>'snapshot')::text END AS snapshot,
    CASE type WHEN 'run.requested' THEN (COALESCE(data->'example'->>'files_hash', ''))::text END AS files_hash,
    CASE type WHEN 'run.requested' THEN ('requested')::text WHEN 'run.started' THEN ('running')::text WHEN 'run.finished' THEN (data->>'status')::text END AS status,
    CASE type WHEN 'container.exited' THEN (data->>'exit_code')::integer END AS exit_code,
    CASE type WHEN 'run.finished' THEN (data->'failure'->>'phase')::text END AS failure_phase,
    CASE type WHEN 'run.finished' THEN (data->'failure'->>'category')::text END AS failure_category,
    CASE type WHEN 'run.finished' THEN (data->'failure'->>'retryable')::boolean END AS failure_retryable,
    CASE type WHEN 'run.requested' THEN (data->>'timeout_seconds')::float8 END AS timeout_seconds,
    CASE type WHEN 'run.requested' THEN (data->>'budget_usd')::float8 END AS budget_usd,
    CASE type WHEN 'run.requested' THEN (recorded_at)::timestamptz END AS requested_at,
    CASE type WHEN 'run.started' THEN (recorded_at)::timestamptz END AS started_at,
    CASE type WHEN 'run.finished' THEN (recorded_at)::timestamptz END AS finished_at,
    CASE type WHEN 'run.finished' THEN (COALESCE(data->>'tokens_in', '0'))::bigint END AS tokens_in,
    CASE type WHEN 'run.finished' THEN (COALESCE(data->>'tokens_out', '0'))::bigint END AS tokens_out,
    CASE type WHEN 'run.finished' THEN (COALESCE(data->>'cost_usd', '0.0'))::float8 END AS cost_usd,
    CASE type WHEN 'run.requested' THEN (CASE WHEN data->>'requested_by' = 'eval:' || (metadata->>'evaluation') || '@' || (metadata->>'evaluation_version') AND (metadata->>'evaluation_version') ~ '^[0-9]{1,9}$' AND coalesce(metadata->>'attempt', '0') ~ '^[0-9]{1,9}$' THEN metadata->>'evaluation' END)::text END AS evaluation,
    CASE type WHEN 'run.requested' THEN (CASE WHEN data->>'requested_by' = 'eval:' || (metadata->>'evaluation') || '@' || (metadata->>'evaluation_version') AND (metadata->>'evaluation_version') ~ '^[0-9]{1,9}$' AND coalesce(metadata->>'attempt', '0') ~ '^[0-9]{1,9}$' THEN metadata->>'evaluation_version' END)::integer END AS evaluation_version,
    CASE type WHEN 'run.requested' THEN (CASE WHEN data->>'requested_by' = 'eval:' || (metadata->>'evaluation') || '@' || (metadata->>'evaluation_version') AND (metadata->>'evaluation_version') ~ '^[0-9]{1,9}$' AND coalesce(metadata->>'attempt', '0') ~ '^[0-9]{1,9}$' THEN metadata->>'case' END)::text END AS case_key,
    CASE type WHEN 'run.requested' THEN (CASE WHEN data->>'requested_by' = 'eval:' || (metadata->>'evaluation') || '@' || (metadata->>'evaluation_version') AND (metadata->>'evaluation_version') ~ '^[0-9]{1,9}$' AND coalesce(metadata->>'attempt', '0') ~ '^[0-9]{1,9}$' THEN metadata->>'attempt' END)::integer END AS attempt,
    CASE type WHEN 'run.requested' THEN (CASE WHEN metadata ? 'origin' THEN 'import:' || COALESCE(metadata->'origin'->>'signer', 'unsigned') ELSE 'here' END)::text END AS provenance
  FROM (SELECT tx_id, global_position, type, data, metadata, recorded_at FROM props.events
  WHERE (tx_id, global_position) > ($1::xid8, $2::bigint) AND (tx_id, global_position) <= ($3::xid8, $4::bigint) AND global_position <> ALL ($5::bigint[]) AND ((type = 'run.requested' AND schema_version = 2) OR (type = 'run.started' AND schema_version = 1) OR (type = 'container.exited' AND schema_version = 1) OR (type = 'run.finished' AND schema_version = 2))) e) s
  WINDOW w AS (PARTITION BY run_id
  ORDER BY tx_id, global_position, nth ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)) each
  WHERE one_per_key = 1) folded
  ON CONFLICT (run_id) DO UPDATE SET agent_type = COALESCE(EXCLUDED.agent_type, t.agent_type), definition = COALESCE(EXCLUDED.definition, t.definition), definition_ref = COALESCE(EXCLUDED.definition_ref, t.definition_ref), digest = COALESCE(EXCLUDED.digest, t.digest), model = COALESCE(EXCLUDED.model, t.model), snapshot = COALESCE(EXCLUDED.snapshot, t.snapshot), files_hash = COALESCE(EXCLUDED.files_hash, t.files_hash), status = COALESCE(EXCLUDED.status, t.status), exit_code = COALESCE(EXCLUDED.exit_code, t.exit_code), failure_phase = COALESCE(EXCLUDED.failure_phase, t.failure_phase), failure_category = COALESCE(EXCLUDED.failure_category, t.failure_category), failure_retryable = COALESCE(EXCLUDED.failure_retryable, t.failure_retryable), timeout_seconds = COALESCE(EXCLUDED.timeout_seconds, t.timeout_seconds), budget_usd = COALESCE(EXCLUDED.budget_usd, t.budget_usd), requested_at = COALESCE(t.requested_at, EXCLUDED.requested_at), started_at = COALESCE(t.started_at, EXCLUDED.started_at), finished_at = COALESCE(EXCLUDED.finished_at, t.finished_at), tokens_in = COALESCE(EXCLUDED.tokens_in, t.tokens_in), tokens_out = COALESCE(EXCLUDED.tokens_out, t.tokens_out), cost_usd = COALESCE(EXCLUDED.cost_usd, t.cost_usd), evaluation = COALESCE(EXCLUDED.evaluation, t.evaluation), evaluation_version = COALESCE(EXCLUDED.evaluation_version, t.evaluation_version), case_key = COALESCE(EXCLUDED.case_key, t.case_key), attempt = COALESCE(EXCLUDED.attempt, t.attempt), provenance = COALESCE(EXCLUDED.provenance, t.provenance);

-- table evaluation_versions
CREATE TABLE projections.evaluation_versions (
    name text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    nonce uuid,
    cases integer,
    provenance text,
    started_at timestamptz,
    PRIMARY KEY (name, version)
);
-- fold of evaluation.started into evaluation_versions
INSERT INTO projections.evaluation_versions AS t (name, version, nonce, cases, provenance, started_at) SELECT name, version, nonce, cases, provenance, started_at
  FROM (SELECT *
  FROM (SELECT name, version,
    projections.oldest(nonce) OVER w AS nonce,
    projections.oldest(cases) OVER w AS cases,
    projections.oldest(provenance) OVER w AS provenance,
    projections.oldest(started_at) OVER w AS started_at, row_number() OVER w AS one_per_key
  FROM (SELECT tx_id, global_position, 1 AS nth,
    CASE type WHEN 'evaluation.started' THEN (substring(stream_id from 12))::text COLLATE "C" END AS name,
    CASE type WHEN 'evaluation.started' THEN (data->>'version')::integer END AS version,
    CASE type WHEN 'evaluation.started' THEN (data->>'nonce')::uuid END AS nonce,
    CASE type WHEN 'evaluation.started' THEN (data->>'cases')::integer END AS cases,
    CASE type WHEN 'evaluation.started' THEN (CASE WHEN metadata ? 'origin' THEN 'import:' || COALESCE(metadata->'origin'->>'signer', 'unsigned') ELSE 'here' END)::text END AS provenance,
    CASE type WHEN 'evaluation.started' THEN (recorded_at)::timestamptz END AS started_at
  FROM (SELECT tx_id, global_position, type, data, metadata, stream_id, recorded_at FROM props.events
  WHERE category IN ('evaluation') AND (tx_id, global_position) > ($1::xid8, $2::bigint) AND (tx_id, global_position) <= ($3::xid8, $4::bigint) AND global_position <> ALL ($5::bigint[]) AND ((type = 'evaluation.started' AND schema_version = 1))) e) s
  WINDOW w AS (PARTITION BY name, version
  ORDER BY tx_id, global_position, nth ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)) each
  WHERE one_per_key = 1) folded
  ON CONFLICT (name, version) DO UPDATE SET nonce = COALESCE(t.nonce, EXCLUDED.nonce), cases = COALESCE(t.cases, EXCLUDED.cases), provenance = COALESCE(t.provenance, EXCLUDED.provenance), started_at = COALESCE(t.started_at, EXCLUDED.started_at);
