package postgres

// WriteSealsSQL is the sealer's statement, for a test of its plan.
const WriteSealsSQL = writeSealsSQL
