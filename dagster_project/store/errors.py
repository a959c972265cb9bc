"""What can go wrong reading or writing the warehouse, each with a message that names the fix."""


class PartitionBusyError(RuntimeError):
    """A live run holds the partition's lease."""


class CorruptPartitionError(IOError):
    pass


class MissingPartitionError(FileNotFoundError):
    pass


class ReadOnlySqlError(ValueError):
    pass


class QueryError(ValueError):
    pass


class SchemaMismatchError(ValueError):
    """Data that does not fit its table's schema (dagster_project/store/schema.py): a column the schema lacks, a
    column it needs and the data lacks, or a value that does not cast to the column's type. Never dropped or
    filled with nulls: the fix is in the body that made the data or in the schema entry."""


class LeaseLostError(PartitionBusyError):
    """A run's lease was taken over (or the partition fenced) before it could publish: nothing of the run is published
    (store/fencing.py)."""
