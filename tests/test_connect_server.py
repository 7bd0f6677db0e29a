"""``jobs.connect_server``'s command line (the server itself runs in ``tests/integration/test_spark_connect.py``)."""

from __future__ import annotations

import pytest

from jobs.connect_server import SERVER_CLASS, ConnectServer, main
from routing.settings import load_settings


def test_the_server_gets_the_jars_and_the_settings_of_a_classic_session() -> None:
    settings = load_settings()
    command = ConnectServer(settings, port=15123, log_path="/tmp/connect.log").command()
    assert command[0].endswith("/bin/spark-submit") and command[-1] == "spark-internal"
    assert command[command.index("--class") + 1] == SERVER_CLASS
    jars = command[command.index("--jars") + 1].split(",")
    assert any("/delta-spark_" in jar for jar in jars) and any("/spark-sql-kafka-0-10_" in jar for jar in jars)
    conf = dict(command[index + 1].split("=", 1) for index, flag in enumerate(command) if flag == "--conf")
    assert conf["spark.connect.grpc.binding.port"] == "15123"
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"  # loopback only
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.driver.extraJavaOptions"] == settings.spark.conf["spark.driver.extraJavaOptions"]
    assert ConnectServer(settings, port=15123).url == "sc://127.0.0.1:15123"


@pytest.mark.parametrize("flags", [["--port", "0"], ["--port", "70000"], ["--port", "x"]])
def test_a_bad_port_is_a_usage_error(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(flags)
    assert exit_info.value.code == 2
    assert "--port" in capsys.readouterr().err


def test_bad_settings_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "spark.remote=http://nope"]) == 2
    assert "spark.remote must be a Spark Connect URL" in capsys.readouterr().err
