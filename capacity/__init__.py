"""capacity: how many cards a workload mix needs with HAMi's slices, and who uses how much.

Run ``python -m capacity --help``. A host tool next to labcheck: it talks to the lab through
labcheck's ``Cluster`` protocol and reuses labcheck's HAMi knowledge and placement picture.
"""

__version__ = "0.1.0"

# Every object a run creates carries these labels; cleanup deletes by name, and the labels let
# a human (or `kubectl delete ns -l`) find what an interrupted run left.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "capacity"
RUN_ID_LABEL = "capacity.lab/run-id"
ENTRY_LABEL = "capacity.lab/entry"
