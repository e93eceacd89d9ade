"""Rows as `tfshard inspect` prints their records: {feature: {kind: [values]}}, nulls
omitted, a struct's children as `parent/child` (the contract's Arrow -> Feature
mapping). Shared by the table scripts of the tests (delta_tables.py, iceberg_tables.py).
"""
import datetime
import decimal
import struct

import pyarrow as pa

EPOCH = datetime.date(1970, 1, 1)


def feature(value, arrow_type):
    """One column value as inspect prints its feature; None when null."""
    if value is None:
        return None
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or \
            pa.types.is_list_view(arrow_type):
        inner = [feature(v, arrow_type.value_type) for v in value]
        kind = next(iter(inner[0])) if inner else kind_of(arrow_type.value_type)
        return {kind: [next(iter(i.values()))[0] for i in inner]}
    if pa.types.is_date32(arrow_type):
        return {"int64": [(value - EPOCH).days]}
    if pa.types.is_timestamp(arrow_type):
        assert arrow_type.unit == "us", arrow_type
        epoch = datetime.datetime(1970, 1, 1, tzinfo=value.tzinfo)
        return {"int64": [(value - epoch) // datetime.timedelta(microseconds=1)]}
    if pa.types.is_boolean(arrow_type):
        return {"int64": [int(value)]}
    if pa.types.is_integer(arrow_type):
        return {"int64": [value]}
    if pa.types.is_decimal(arrow_type):
        # The contract: the unscaled value / 10^scale in float64, then float32.
        unscaled = int(value.scaleb(arrow_type.scale).to_integral_value(decimal.ROUND_HALF_EVEN))
        return {"float": [f32(float(unscaled) / 10.0 ** arrow_type.scale)]}
    if pa.types.is_floating(arrow_type):
        return {"float": [f32(value)]}
    if pa.types.is_string(arrow_type) or pa.types.is_string_view(arrow_type) or \
            pa.types.is_large_string(arrow_type):
        return {"bytes": [value]}
    raise ValueError(f"no feature for {arrow_type}")


def f32(x):
    """x rounded to float32, as the float_list holds it."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def kind_of(arrow_type):
    if pa.types.is_floating(arrow_type):
        return "float"
    if pa.types.is_floating(arrow_type) is False and not pa.types.is_integer(arrow_type) \
            and not pa.types.is_date(arrow_type):
        return "bytes"
    return "int64"


def put_features(record, name, value, arrow_type):
    """Adds a column's features to a record: a struct's children as `parent/child`."""
    if pa.types.is_struct(arrow_type):
        if value is not None:
            for child in arrow_type:
                put_features(record, f"{name}/{child.name}", value.get(child.name), child.type)
        return
    f = feature(value, arrow_type)
    if f is not None:
        record[name] = f


def table_records(table):
    """Every row of a pyarrow table, as records."""
    records = []
    for row in table.to_pylist():
        record = {}
        for field in table.schema:
            put_features(record, field.name, row[field.name], field.type)
        records.append(record)
    return records
