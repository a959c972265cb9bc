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
