"""moto's EC2 on loopback for Ray's own resource fill-in, one server for the whole run."""
import pytest


@pytest.fixture(scope="session")
def ec2():
    pytest.importorskip("ray")
    from .ray_launcher import ec2_catalogue

    with ec2_catalogue():
        yield
