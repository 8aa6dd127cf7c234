-- projection usage (version 1)

-- table llm_usage
CREATE TABLE projections.llm_usage (
    run_id uuid NOT NULL,
    requests integer,
    tokens_in bigint,
    tokens_out bigint,
    cost_usd numeric,
    PRIMARY KEY (run_id)
);
-- fold of llm.responded into llm_usage
INSERT INTO projections.llm_usage AS t (run_id, requests, tokens_in, tokens_out, cost_usd) SELECT run_id, requests, tokens_in, tokens_out, cost_usd
  FROM (SELECT *
  FROM (SELECT run_id, (sum(requests) OVER w)::integer AS requests, (sum(tokens_in) OVER w)::bigint AS tokens_in, (sum(tokens_out) OVER w)::bigint AS tokens_out, (sum(cost_usd) OVER w)::numeric AS cost_usd, row_number() OVER w AS one_per_key
  FROM (SELECT tx_id, global_position, 1 AS nth,
    CASE type WHEN 'llm.responded' THEN (data->>'run_id')::uuid END AS run_id,
    CASE type WHEN 'llm.responded' THEN (1)::integer END AS requests,
    CASE type WHEN 'llm.responded' THEN (data->>'tokens_in')::bigint END AS tokens_in,
    CASE type WHEN 'llm.responded' THEN (data->>'tokens_out')::bigint END AS tokens_out,
    CASE type WHEN 'llm.responded' THEN (data->>'cost_usd')::numeric END AS cost_usd
  FROM (SELECT tx_id, global_position, type, data, recorded_at FROM props.events
  WHERE (tx_id, global_position) > ($1::xid8, $2::bigint) AND (tx_id, global_position) <= ($3::xid8, $4::bigint) AND global_position <> ALL ($5::bigint[]) AND ((type = 'llm.responded' AND schema_version = 1))) e) s
  WINDOW w AS (PARTITION BY run_id
  ORDER BY tx_id, global_position, nth ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)) each
  WHERE one_per_key = 1) folded
  ON CONFLICT (run_id) DO UPDATE SET requests = COALESCE(t.requests, 0) + COALESCE(EXCLUDED.requests, 0), tokens_in = COALESCE(t.tokens_in, 0) + COALESCE(EXCLUDED.tokens_in, 0), tokens_out = COALESCE(t.tokens_out, 0) + COALESCE(EXCLUDED.tokens_out, 0), cost_usd = COALESCE(t.cost_usd, 0) + COALESCE(EXCLUDED.cost_usd, 0);
