"""The disk and object-store warehouses implement one declared interface (store/warehouse_interface.py): every method
of the protocol, with the protocol's parameters, on both classes."""

import inspect

from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.dagster_project.store.warehouse_interface import WarehouseStore


def protocol_methods() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(WarehouseStore).items()
            if inspect.isfunction(member) and not name.startswith("_")}


def test_both_warehouses_have_every_method_of_the_interface_with_its_parameters():
    methods = protocol_methods()
    assert len(methods) > 30
    for implementation in (Warehouse, ObjectWarehouse):
        for name, signature in methods.items():
            assert hasattr(implementation, name), f"{implementation.__name__} lacks {name}"
            implemented = inspect.signature(getattr(implementation, name))
            assert [(p.name, p.kind) for p in implemented.parameters.values()] == [
                (p.name, p.kind) for p in signature.parameters.values()], (implementation.__name__, name)


def test_an_opened_warehouse_is_a_warehouse_store(tmp_path):
    assert isinstance(Warehouse(tmp_path), WarehouseStore)
    assert not isinstance(object(), WarehouseStore)
