"""The log: a generic event store on PostgreSQL, and nothing of the domain.

Events, their registry and upcasting (`events`); the store with one retry policy for every
append path (`store`, `retries`); reading through the visibility fence and decoding
(`reader`); subscriptions; checkpoints with one owner; the fence's diagnostics; partitions;
leadership (every advisory-lock key, and "one active instance"); PostgreSQL's errors
translated to props' (`errors`); blobs; `sql`, the one door to the pool for the layers
above; the migrator; the database choice and the embedded server.

May import: `props.schema` (SQL text and migrations) and itself. Never the catalog, scoring
or specimens: the registry of event types is an argument of the store.
"""
