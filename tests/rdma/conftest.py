import pytest

from reference_engine.rdma.sim.scheduler import RoundRobin, Scheduler
from reference_engine.rdma.sim.sim_cluster import SimCluster


def _settle(cluster: SimCluster, max_steps: int = 5000):
    """Run every actor of a controlled cluster round-robin until nothing is left to do."""
    result = Scheduler(RoundRobin(), max_steps).run(cluster.actors())
    assert result.quiescent, "cluster did not settle"
    return result


@pytest.fixture
def settle():
    return _settle


@pytest.fixture
def controlled():
    def make(profile="rfc", **kw):
        kw.setdefault("num_qp_per_ep", 1)
        return SimCluster(profile, controlled=True, **kw)
    return make
