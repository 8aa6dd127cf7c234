-- A token scope for people's verdicts: `review` lets its holder confirm or correct grades
-- (the viewer's review page writes `grade.reviewed` under the token's name). Reading takes
-- `read`; a verdict changes what the human scorer says, so it is a scope of its own and not
-- part of `read`.

ALTER TABLE props.api_tokens DROP CONSTRAINT api_tokens_scopes_check;
ALTER TABLE props.api_tokens ADD CONSTRAINT api_tokens_scopes_check
    CHECK (cardinality(scopes) > 0
           AND scopes <@ ARRAY['read', 'request', 'push', 'review', 'admin']::text[]);
