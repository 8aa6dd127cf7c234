"""`props db ...`: migrate, status, dsn, stop, schema."""

from __future__ import annotations

from typing import Any

from props.tools.command_line import arguments


def add_parser(sub: Any) -> None:
    db = sub.add_parser(
        "db", help="the database: migrate, status, dsn, stop, schema",
        description="Manage the PostgreSQL database props uses (PROPS_DSN, or the embedded one).",
    )
    cmds = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    for name, summary, description in [
        ("migrate", "apply pending schema migrations",
         "Apply every pending migration in schema/migrations, in order, under an advisory "
         "lock. Refuses a migration changed after it was applied."),
        ("status", "migrations, event count and the visibility fence",
         "Show which migrations are applied, how many events the log holds, and whether a "
         "long transaction holds the fence back."),
        ("dsn", "print the connection string in use",
         'Print the DSN props uses, so that psql "$(props db dsn)" works, on the embedded '
         "server too (it is started if needed)."),
        ("stop", "stop the embedded server",
         "Stop the embedded PostgreSQL cleanly (no effect with PROPS_DSN set)."),
        ("harden", "revoke what only a superuser can take from agents and analysts",
         "As a superuser (PROPS_DSN or --dsn), revoke from everyone but props' own roles the "
         "built-in functions an agent or analyst must not call (large objects, advisory "
         "locks, NOTIFY, transaction ids), TEMP, and make the analyst read-only with "
         "timeouts. Idempotent; `props db status` then shows nothing left. `props db "
         "migrate` run as a superuser does the same."),
        ("schema", "print the schema as the database has it",
         "Print the props schemas as this database has them, as readable SQL: tables, views, "
         "function bodies, grants and default privileges (the format of schema/schema.sql). "
         "With --from-migrations, as migrating an empty database gives them: schema/schema.sql "
         "itself (`props db schema --from-migrations > schema/schema.sql` after a new "
         "migration; tests/test_schema.py fails while the file differs)."),
    ]:
        sub_parser = cmds.add_parser(name, help=summary, description=description)
        sub_parser.set_defaults(handler=f"db:{name}_cmd")
        if name == "harden":
            sub_parser.add_argument("--dsn", metavar="DSN",
                                    help="a superuser's connection to the props database "
                                    "(default: PROPS_DSN, or the embedded server's owner)")
        if name == "status":
            arguments.add_format(sub_parser, ("table", "json"))
        if name == "schema":
            sub_parser.add_argument(
                "--from-migrations", action="store_true",
                help="migrate a scratch database of the same server (dropped after) and print "
                "its schema instead of this database's")
        if name == "dsn":
            role = sub_parser.add_mutually_exclusive_group()
            role.add_argument(
                "--analyst", action="store_true",
                help="the connection string of the read-only analyst role (projections only)")
            role.add_argument(
                "--service", action="store_true",
                help="the connection string of the service role (appends and reads; owns "
                     "nothing). Without either flag: the owner's")
