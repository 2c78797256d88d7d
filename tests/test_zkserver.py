import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from gale.zkserver import ZooKeeperServer, four_letter


def test_private_server_start_stop_restart(tmp_path):
    server = ZooKeeperServer(data_dir=tmp_path / "zk")
    with server:
        assert four_letter(server.host, server.port, "ruok") == "imok"
        client = KazooClient(hosts=server.address, timeout=10)
        client.start(timeout=10)
        client.create("/persisted", b"yes")
        server.restart()
        # data survives a restart (same data dir), and the client reconnects
        assert client.retry(client.get, "/persisted")[0] == b"yes"
        client.stop()
        client.close()
    assert not server.running()
    with pytest.raises(OSError):
        four_letter(server.host, server.port, "ruok", timeout=0.5)


def test_session_server_and_chroot_isolation(zk, zk_server, zk_chroot):
    zk.create("/mine", b"1")
    other = KazooClient(hosts=zk_server.address)
    other.start(timeout=10)
    try:
        assert other.exists(f"{zk_chroot}/mine") is not None
    finally:
        other.stop()
        other.close()
