-- projection ground_truth (version 2)

-- table snapshots
CREATE TABLE projections.snapshots (
    slug text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    ground_truth_hash text,
    files integer,
    synced_at timestamptz,
    retired_at timestamptz,
    PRIMARY KEY (slug, version)
);

-- table file_sets
CREATE TABLE projections.file_sets (
    slug text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    files_hash text COLLATE "C" NOT NULL,
    name text,
    files text[],
    PRIMARY KEY (slug, version, files_hash)
);

-- table true_positives
CREATE TABLE projections.true_positives (
    slug text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    tp_id text COLLATE "C" NOT NULL,
    severity text,
    rationale text,
    occurrences integer,
    PRIMARY KEY (slug, version, tp_id)
);

-- table tp_occurrences
CREATE TABLE projections.tp_occurrences (
    slug text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    tp_id text COLLATE "C" NOT NULL,
    occurrence integer NOT NULL,
    files text[],
    locations jsonb,
    PRIMARY KEY (slug, version, tp_id, occurrence)
); ALTER TABLE projections.tp_occurrences ALTER COLUMN locations SET STATISTICS 0;

-- table false_positives
CREATE TABLE projections.false_positives (
    slug text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    fp_id text COLLATE "C" NOT NULL,
    rationale text,
    relevant_files text[],
    locations jsonb,
    PRIMARY KEY (slug, version, fp_id)
); ALTER TABLE projections.false_positives ALTER COLUMN locations SET STATISTICS 0;

-- table scopes
CREATE TABLE projections.scopes (
    slug text COLLATE "C" NOT NULL,
    version integer NOT NULL,
    files_hash text COLLATE "C" NOT NULL,
    tp_id text COLLATE "C" NOT NULL,
    occurrence integer NOT NULL,
    PRIMARY KEY (slug, version, files_hash, tp_id, occurrence)
);

-- folded in Python: snapshot.retired, snapshot.synced
