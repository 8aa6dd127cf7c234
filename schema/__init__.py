"""The database schema: ordered migrations, named queries, and the migrator that applies them."""
