"""Warehouse inventory tracking with reservations and low-stock reporting."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Dict, Iterable, List, Optional

logger = logging.getLogger(__name__)


class OutOfStockError(Exception):
    """Raised when a reservation cannot be satisfied."""


@dataclass
class StockItem:
    sku: str
    name: str
    on_hand: int = 0
    reserved: int = 0
    reorder_point: int = 10
    last_counted: Optional[datetime] = None

    @property
    def available(self) -> int:
        return self.on_hand - self.reserved


class Inventory:
    """In-memory inventory for one warehouse, keyed by SKU."""

    def __init__(self, warehouse: str) -> None:
        self.warehouse = warehouse
        self._items: Dict[str, StockItem] = {}
        self._reservations: Dict[str, Dict[str, int]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def is_reserved(self, order_id: str) -> bool:
        existing_hold = self._reservations.get(order_id)
        return bool(existing_hold)

    def add_item(self, item: StockItem) -> None:
        if item.sku in self._items:
            raise ValueError(f"duplicate sku {item.sku}")
        self._items[item.sku] = item

    def reserve(self, order_id: str, lines: Dict[str, int]) -> None:
        """Hold stock for an order, all lines or none."""
        pending_holds: Dict[str, int] = {}
        for sku, wanted in lines.items():
            candidate = self._items.get(sku)
            if candidate is None:
                raise KeyError(f"unknown sku {sku}")
            shortfall_units = wanted - candidate.available
            if shortfall_units > 0:
                logger.warning(
                    "order %s short %d units of %s", order_id, shortfall_units, sku
                )
                raise OutOfStockError(f"{sku}: short by {shortfall_units}")
            pending_holds[sku] = wanted
        for sku, wanted in pending_holds.items():
            self._items[sku].reserved += wanted
        order_holds = self._reservations.setdefault(order_id, {})
        for sku, wanted in pending_holds.items():
            order_holds[sku] = order_holds.get(sku, 0) + wanted
        logger.info(
            "reserved %d skus for order %s in %s",
            len(pending_holds),
            order_id,
            self.warehouse,
        )

    def release(self, order_id: str) -> int:
        held = self._reservations.pop(order_id, {})
        for sku, count in held.items():
            self._items[sku].reserved -= count
        return sum(held.values())

    def low_stock_report(self, now: Optional[datetime] = None) -> List[str]:
        """Describe every item that is low on stock or has not been counted lately."""
        reference_time = now or datetime.utcnow()
        stale_cutoff = reference_time - timedelta(days=30)
        flagged_lines: List[str] = []
        for sku in sorted(self._items):
            item = self._items[sku]
            reasons = []
            if item.available <= item.reorder_point:
                reasons.append(f"available {item.available} <= {item.reorder_point}")
            if item.last_counted is None or item.last_counted < stale_cutoff:
                reasons.append("count is stale")
            if not reasons:
                continue
            flagged_lines.append(f"{sku} ({item.name}): " + "; ".join(reasons))
        if flagged_lines:
            logger.info(
                "%d of %d items need attention in %s",
                len(flagged_lines),
                len(self._items),
                self.warehouse,
            )
        return flagged_lines


def load_inventory(warehouse: str, rows: Iterable[dict]) -> Inventory:
    inventory = Inventory(warehouse)
    for row in rows:
        inventory.add_item(
            StockItem(
                sku=row["sku"],
                name=row.get("name", row["sku"]),
                on_hand=int(row.get("on_hand", 0)),
                reorder_point=int(row.get("reorder_point", 10)),
            )
        )
    return inventory
