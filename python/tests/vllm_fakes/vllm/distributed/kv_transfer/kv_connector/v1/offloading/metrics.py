"""Test stand-in for OffloadingConnectorStats of
vllm/backends/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py at
vllm-project/vllm@055e47c28003156421365af985d676fc921cb075 (imported there through the shim at
vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py): the stats a tier's
get_stats() returns, with flat metric names, a type per name and values per label tuple.
Counters add up across aggregate(), gauges keep the latest value."""

from dataclasses import dataclass, field
from typing import Any

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"


@dataclass
class KVConnectorStats:  # vllm/.../kv_connector/v1/metrics.py at the same commit
    data: dict = field(default_factory=dict)


@dataclass
class OffloadingConnectorStats(KVConnectorStats):
    def __post_init__(self):
        if "data" not in self.data:
            self.reset()

    def reset(self):
        self.data: dict[str, Any] = {"types": {}, "data": {}}

    def is_empty(self) -> bool:
        return not self.data.get("data")

    def aggregate(self, other: "OffloadingConnectorStats") -> "OffloadingConnectorStats":
        if other.is_empty():
            return self
        for key, values in other.data["data"].items():
            kind = other.data["types"][key]
            self.data["types"].setdefault(key, kind)
            mine = self.data["data"].setdefault(key, {})
            for labels, value in values.items():
                if kind == HISTOGRAM:
                    mine.setdefault(labels, []).extend(value)
                elif kind == COUNTER:
                    mine[labels] = mine.get(labels, 0) + value
                else:
                    mine[labels] = value
        return self

    def reduce(self) -> dict:
        out = {}
        for key, values in self.data["data"].items():
            kind = self.data["types"][key]
            for labels, value in values.items():
                name = f"{key}:{labels}" if labels else key
                if kind == HISTOGRAM:
                    out[f"{name}_count"] = len(value)
                    out[f"{name}_sum"] = sum(value)
                else:
                    assert isinstance(value, (int, float))
                    out[name] = value
        return out

    def increase_counter(self, counter_name: str, counter_increase_value=1,
                         labelvalues: tuple = ()) -> None:
        self.data["types"].setdefault(counter_name, COUNTER)
        values = self.data["data"].setdefault(counter_name, {})
        values[labelvalues] = values.get(labelvalues, 0) + counter_increase_value

    def set_gauge(self, gauge_name: str, gauge_value, labelvalues: tuple = ()) -> None:
        self.data["types"].setdefault(gauge_name, GAUGE)
        self.data["data"].setdefault(gauge_name, {})[labelvalues] = gauge_value

    def observe_histogram(self, histogram_name: str, histogram_value,
                          labelvalues: tuple = ()) -> None:
        self.data["types"].setdefault(histogram_name, HISTOGRAM)
        values = self.data["data"].setdefault(histogram_name, {})
        values.setdefault(labelvalues, []).append(histogram_value)
