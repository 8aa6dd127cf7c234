-- What a filter can offer (props.projections.filter_choices): the viewer's forms list them
-- and refuse a value that is not among them.

-- choices --
-- What the filters offer: every snapshot, file set name and registered scorer (small
-- tables), the active scorer, and every evaluation recorded.
SELECT coalesce((SELECT array_agg(DISTINCT slug ORDER BY slug) FROM projections.snapshots),
                '{}') AS snapshots,
       coalesce((SELECT array_agg(DISTINCT name ORDER BY name) FROM projections.file_sets),
                '{}') AS file_sets,
       coalesce((SELECT array_agg(name || '@' || version ORDER BY name, version)
                   FROM projections.scorers), '{}') AS scorers,
       (SELECT name || '@' || version FROM projections.active_scorer) AS active,
       coalesce((SELECT array_agg(DISTINCT data->>'name' ORDER BY data->>'name')
                   FROM props.events
                  WHERE category = 'evaluation' AND type = 'evaluation.started'),
                '{}') AS evaluations
