"""Kafka topic admin APIs (kafka-port/src/admin) against the real binary with kafka-python's
KafkaAdminClient: CreateTopics, CreatePartitions, DeleteTopics, and the partition count
surviving a restart; the hostile review's findings (notes review-admin.md): floors of dead
queues, racing admin requests, offsets of deleted topics, topic ids."""

import struct
import threading

import pytest

kafka = pytest.importorskip("kafka", reason="kafka-python is in scripts/lib/requirements.txt")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import NewPartitions, NewTopic  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402
from kafka.errors import (  # noqa: E402
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


def admin_for(broker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)


def partitions(admin: KafkaAdminClient, topic: str) -> int:
    [t] = admin.describe_topics([topic])
    assert t["error_code"] == 0, t
    return len(t["partitions"])


def test_created_topics_show_their_partitions_grow_and_survive_a_restart(broker, http):
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("seven", num_partitions=7, replication_factor=1)])
        assert partitions(admin, "seven") == 7
        # The queue is there for the HTTP API too.
        assert http.get("/api/v1/resources/queues/seven").status_code == 200
        admin.create_partitions({"seven": NewPartitions(total_count=9)})
        assert partitions(admin, "seven") == 9
    finally:
        admin.close()
    broker.stop()
    broker.start()
    admin = admin_for(broker)
    try:
        assert partitions(admin, "seven") == 9
    finally:
        admin.close()


def test_validate_only_creates_nothing(broker):
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("dry", 3, 1)], validate_only=True)
        assert "dry" not in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.parametrize(
    "topic, error",
    [
        (NewTopic("a b", 1, 1), InvalidTopicError),
        (NewTopic("rf3", 1, 3), InvalidReplicationFactorError),
        (NewTopic("zero", 0, 1), InvalidPartitionsError),
        (NewTopic("cfg", 1, 1, topic_configs={"cleanup.policy": "compact"}),
         InvalidConfigurationError),
    ],
)
def test_refused_topics_get_kafkas_error_and_are_not_created(broker, topic, error):
    admin = admin_for(broker)
    try:
        with pytest.raises(error):
            admin.create_topics([topic])
        assert topic.name not in admin.list_topics()
    finally:
        admin.close()


def test_existing_topics_and_shrinking_are_refused(broker):
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("twice", 3, 1)])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("twice", 3, 1)])
        for total in (3, 2):
            with pytest.raises(InvalidPartitionsError):
                admin.create_partitions({"twice": NewPartitions(total_count=total)})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.create_partitions({"absent": NewPartitions(total_count=5)})
        assert partitions(admin, "twice") == 3
    finally:
        admin.close()


def test_deleted_topics_are_gone_and_unknown_ones_are_refused(broker, http):
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("doomed", 5, 1)])
        admin.delete_topics(["doomed"])
        assert "doomed" not in admin.list_topics()
        assert http.get("/api/v1/resources/queues/doomed").status_code == 404
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics(["doomed"])
        # Created again, it starts from the count asked, not the deleted topic's.
        admin.create_topics([NewTopic("doomed", 2, 1)])
        assert partitions(admin, "doomed") == 2
    finally:
        admin.close()


def test_describe_configs_lists_every_topic_and_broker_config(broker):
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("described", 1, 1)])
        got = admin.describe_configs(
            [
                ConfigResource(ConfigResourceType.TOPIC, "described"),
                ConfigResource(ConfigResourceType.BROKER, "0"),
            ],
            config_filter="all",
        )
        topic = got["topic"]["described"]
        assert len(topic) == 31
        assert topic["retention.ms"]["value"] == "-1"
        assert topic["cleanup.policy"]["value"] == "delete"
        assert int(topic["max.message.bytes"]["value"]) > 0
        assert {"num.partitions", "broker.id"} <= set(got["broker"]["0"])
    finally:
        admin.close()


def test_a_queue_deleted_over_http_leaves_no_partition_count_to_its_successor(broker, http):
    """Review 1: the floor of a queue deleted over HTTP is not inherited by the next queue."""
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("reborn", 8, 1)])
        assert partitions(admin, "reborn") == 8
        assert http.delete("/api/v1/resources/queues/reborn").status_code in (200, 204)
        assert http.post("/api/v1/configure", json={"queue": "reborn"}).status_code == 200
        assert partitions(admin, "reborn") == 1, "the default, not the dead topic's 8"
        # CreateTopics of the name answers it exists; growth starts from the default.
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("reborn", 3, 1)])
        admin.create_partitions({"reborn": NewPartitions(total_count=2)})
        assert partitions(admin, "reborn") == 2
    finally:
        admin.close()


def race(n: int, act) -> list:
    """Runs act(i) on n threads released together; each outcome or exception, by i."""
    out: list = [None] * n
    gate = threading.Barrier(n)

    def run(i: int) -> None:
        gate.wait()
        try:
            out[i] = act(i)
        except Exception as e:  # noqa: BLE001 - the outcome under test
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


RACERS = 6


def test_racing_creates_of_one_name_have_exactly_one_winner(broker):
    """Review 3: of concurrent CreateTopics of one name, one succeeds, with its count."""
    admins = [admin_for(broker) for _ in range(RACERS)]
    try:
        for round_ in range(3):
            name = f"contested-{round_}"
            out = race(RACERS, lambda i: admins[i].create_topics([NewTopic(name, i + 2, 1)]))
            won = [i for i, o in enumerate(out) if not isinstance(o, Exception)]
            lost = [o for o in out if isinstance(o, Exception)]
            assert len(won) == 1, out
            assert all(isinstance(o, TopicAlreadyExistsError) for o in lost), out
            assert partitions(admins[0], name) == won[0] + 2
    finally:
        for a in admins:
            a.close()


def test_racing_growths_never_leave_fewer_partitions_than_one_was_told(broker):
    """Review 2: of concurrent CreatePartitions, the count left is the largest granted."""
    admins = [admin_for(broker) for _ in range(RACERS)]
    try:
        for round_ in range(3):
            name = f"grown-{round_}"
            admins[0].create_topics([NewTopic(name, 2, 1)])
            out = race(
                RACERS,
                lambda i: admins[i].create_partitions({name: NewPartitions(total_count=i + 3)}),
            )
            granted = [i + 3 for i, o in enumerate(out) if not isinstance(o, Exception)]
            assert granted, out
            assert all(
                isinstance(o, InvalidPartitionsError) or not isinstance(o, Exception)
                for o in out
            ), out
            assert partitions(admins[0], name) == max(granted), (granted, out)
    finally:
        for a in admins:
            a.close()


def test_a_deleted_topics_committed_offsets_go_with_it(broker):
    """Review 5: a topic created again does not resume at the old incarnation's offsets."""
    admin = admin_for(broker)
    tp = TopicPartition("recycled", 0)
    try:
        admin.create_topics([NewTopic("recycled", 1, 1)])
        c = KafkaConsumer(
            bootstrap_servers=broker.kafka_bootstrap,
            group_id="recycler",
            enable_auto_commit=False,
        )
        c.assign([tp])
        c.commit({tp: OffsetAndMetadata(5, "", -1)})
        assert c.committed(tp) == 5
        c.close()
        admin.delete_topics(["recycled"])
        admin.create_topics([NewTopic("recycled", 1, 1)])
        p = KafkaProducer(
            bootstrap_servers=broker.kafka_bootstrap, acks="all", enable_idempotence=False
        )
        for i in range(8):
            p.send("recycled", value=str(i).encode(), partition=0)
        p.flush()
        p.close()
        c = KafkaConsumer(
            bootstrap_servers=broker.kafka_bootstrap,
            group_id="recycler",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=5_000,
        )
        c.assign([tp])
        assert c.committed(tp) is None
        got = []
        for m in c:
            got.append(m.offset)
            if len(got) == 8:
                break
        c.close()
        assert got == list(range(8))
    finally:
        admin.close()


def test_deleting_by_topic_id_answers_unknown_topic_id(broker):
    """Review 7: v6 entries naming an id only get UNKNOWN_TOPIC_ID each, never a duplicate."""
    from test_kafka_port import read_frame, request

    import socket

    entry = b"\x00" + bytes(range(16)) + b"\x00"  # null name, an id, no tags
    body = b"\x03" + entry + entry + struct.pack(">i", 1000) + b"\x00"
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10) as s:
        s.sendall(request(20, 6, 9, body, tags=True))
        resp = read_frame(s)
    corr, _tags, _throttle, n = struct.unpack(">iBiB", resp[:10])
    assert (corr, n - 1) == (9, 2)
    pos = 10
    for _ in range(2):
        assert resp[pos] == 0, "a null name"
        pos += 1
        assert resp[pos : pos + 16] == bytes(range(16))
        pos += 16
        (code,) = struct.unpack(">h", resp[pos : pos + 2])
        assert code == 100, "UNKNOWN_TOPIC_ID"
        pos += 2
        mlen = resp[pos]  # compact nullable message, its tags
        pos += 1 + max(mlen - 1, 0) + 1


def test_describe_cluster_names_this_broker_as_broker_and_controller(broker):
    admin = admin_for(broker)
    try:
        got = admin.describe_cluster()
    finally:
        admin.close()
    assert got["cluster_id"] == "queenmq"
    [b] = got["brokers"]
    # `is_fenced` only comes in a DescribeCluster answer (the Metadata fallback has none).
    assert b["is_fenced"] is False
    assert (b["host"], b["port"]) == ("127.0.0.1", broker.kafka_port)
    assert got["controller_id"] == b["broker_id"]


def test_describe_log_dirs_shows_the_data_dir_and_partition_sizes(broker):
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("sized", 3, 1)])
        p = KafkaProducer(
            bootstrap_servers=broker.kafka_bootstrap, acks="all", enable_idempotence=False
        )
        for i in range(20):
            p.send("sized", value=b"x" * 1000, partition=1)
        p.flush()
        p.close()
        [one] = admin.describe_log_dirs({"sized": [1, 2, 7]})
        [everything] = admin.describe_log_dirs()
    finally:
        admin.close()
    [d] = one["log_dirs"]
    assert d["error_code"] == 0
    assert d["log_dir"] == str(broker.data_dir)
    [t] = d["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in t["partitions"]}
    assert set(sizes) == {1, 2}, "partition 7 does not exist"
    assert sizes[1] >= 20_000 and sizes[2] == 0
    if "total_bytes" in d:
        assert d["total_bytes"] >= d["usable_bytes"] > 0
    [d] = everything["log_dirs"]
    [t] = [t for t in d["topics"] if t["name"] == "sized"]
    assert len(t["partitions"]) == 3


def options_of(doc):
    """The queue options object somewhere in an HTTP queue document."""
    if isinstance(doc, dict):
        if "retentionSeconds" in doc:
            return doc
        for v in doc.values():
            found = options_of(v)
            if found is not None:
                return found
    return None


def topic_config(admin: KafkaAdminClient, topic: str, key: str) -> dict:
    from kafka.admin import ConfigResource, ConfigResourceType

    got = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
    )
    return got["topic"][topic][key]


@pytest.mark.parametrize("incremental", [False, True])
def test_retention_ms_round_trips_through_alter_and_describe_configs(broker, http, incremental):
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("kept", 1, 1)])
        assert topic_config(admin, "kept", "retention.ms")["value"] == "-1"
        res = ConfigResource(ConfigResourceType.TOPIC, "kept", configs={"retention.ms": "60000"})
        dry = admin.alter_configs([res], validate_only=True, incremental=incremental)
        assert dry == {"topic": {"kept": "OK"}}
        assert topic_config(admin, "kept", "retention.ms")["value"] == "-1", "validate_only"
        res = ConfigResource(ConfigResourceType.TOPIC, "kept", configs={"retention.ms": "60000"})
        assert admin.alter_configs([res], incremental=incremental) == {"topic": {"kept": "OK"}}
        got = topic_config(admin, "kept", "retention.ms")
        assert got["value"] == "60000"
        assert got["config_source"] in (1, "DYNAMIC_TOPIC_CONFIG")
        # It is the queue's own retention, as the HTTP API shows it.
        opts = options_of(http.get("/api/v1/resources/queues/kept").json())
        assert (opts["retentionSeconds"], opts["retentionEnabled"]) == (60, True), opts
        bad = ConfigResource(
            ConfigResourceType.TOPIC, "kept", configs={"cleanup.policy": "compact"}
        )
        out = admin.alter_configs([bad], raise_on_unknown=False, incremental=incremental)
        assert "InvalidConfig" in out["topic"]["kept"], out
        unknown = ConfigResource(ConfigResourceType.TOPIC, "kept", configs={"no.such": "1"})
        out = admin.alter_configs([unknown], raise_on_unknown=False, incremental=incremental)
        assert "InvalidConfig" in out["topic"]["kept"], out
        assert topic_config(admin, "kept", "retention.ms")["value"] == "60000"
    finally:
        admin.close()
    broker.stop()
    broker.start()
    admin = admin_for(broker)
    try:
        assert topic_config(admin, "kept", "retention.ms")["value"] == "60000", "durable"
    finally:
        admin.close()


def test_create_topics_configs_go_through_the_same_mapping(broker):
    admin = admin_for(broker)
    try:
        admin.create_topics(
            [NewTopic("born-kept", 1, 1, topic_configs={"retention.ms": "3600000"})]
        )
        assert topic_config(admin, "born-kept", "retention.ms")["value"] == "3600000"
    finally:
        admin.close()


def test_names_that_collide_once_dots_are_underscores_are_refused(broker, http):
    # Kafka refuses a topic whose name equals an existing one after '.' -> '_' (its metrics
    # names would be shared); here a queue made over HTTP counts as well.
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("metrics.cpu", 1, 1)])
        assert http.post("/api/v1/configure", json={"queue": "logs_app"}).status_code == 200
        for name, existing in (("metrics_cpu", "metrics.cpu"), ("logs.app", "logs_app")):
            for validate_only in (True, False):
                with pytest.raises(InvalidTopicError, match=f"collides with existing topic: {existing}"):
                    admin.create_topics([NewTopic(name, 1, 1)], validate_only=validate_only)
        admin.create_topics([NewTopic("metrics-cpu", 1, 1), NewTopic("metrics.cpu2", 1, 1),
                             NewTopic("Logs.app", 1, 1)])
        # Two colliding names in one request: the first is made, the second collides with it.
        with pytest.raises(InvalidTopicError, match="Topic 'pair_one' collides with existing topic: pair.one"):
            admin.create_topics([NewTopic("pair.one", 1, 1), NewTopic("pair_one", 1, 1)])
        topics = set(admin.list_topics())
        # Case counts, as in Kafka: "Logs.app" is no "logs_app".
        assert {"metrics.cpu", "logs_app", "metrics-cpu", "metrics.cpu2", "Logs.app", "pair.one"} <= topics
        assert not {"metrics_cpu", "logs.app", "pair_one"} & topics
    finally:
        admin.close()


def test_auto_creation_refuses_a_colliding_name(broker, http):
    confluent = pytest.importorskip("confluent_kafka")
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("orders.eu", 1, 1)])
    finally:
        admin.close()
    failed, delivered = [], []
    p = confluent.Producer({"bootstrap.servers": broker.kafka_bootstrap, "message.timeout.ms": 5000})
    p.produce("orders_eu", b"{}", on_delivery=lambda err, msg: (failed if err else delivered).append(err))
    p.produce("orders.eu", b"{}", on_delivery=lambda err, msg: (failed if err else delivered).append(err))
    assert p.flush(15) == 0
    assert len(failed) == 1 and len(delivered) == 1, (failed, delivered)
    # Refused for the collision (Metadata's INVALID_TOPIC_EXCEPTION), not timed out.
    assert failed[0].code() == confluent.KafkaError.TOPIC_EXCEPTION, failed[0]
    assert http.get("/api/v1/resources/queues/orders_eu").status_code == 404
    assert http.get("/api/v1/resources/queues/orders.eu").status_code == 200


@pytest.mark.parametrize("incremental", [False, True])
def test_alter_configs_takes_back_what_holds_and_message_format_version_changes_nothing(
    broker, incremental
):
    """librdkafka's 0092 sends AlterConfigs every config DescribeConfigs showed, with
    message.format.version=0.10.0.0 (Kafka 3.7 ignores the config: every batch is v2). What
    holds is accepted and nothing changes; another value of a fixed config is refused."""
    from kafka.admin import ConfigResource, ConfigResourceType

    def alter(configs):
        res = ConfigResource(ConfigResourceType.TOPIC, "mixed", configs=configs)
        out = admin.alter_configs([res], raise_on_unknown=False, incremental=incremental)
        return out["topic"]["mixed"]

    def produce(values):
        p = KafkaProducer(
            bootstrap_servers=broker.kafka_bootstrap, acks="all", enable_idempotence=False
        )
        for v in values:
            p.send("mixed", value=v, partition=0)
        p.flush()
        p.close()

    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic("mixed", 1, 1, topic_configs={"retention.ms": "3600000"})])
        produce([b"v2-%d" % i for i in range(3)])
        got = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "mixed")], config_filter="all"
        )["topic"]["mixed"]
        back = {k: c["value"] for k, c in got.items() if c["value"] is not None}
        back["message.format.version"] = "0.10.0.0"
        assert alter(back) == "OK"
        assert topic_config(admin, "mixed", "message.format.version")["value"] == "3.0-IV1"
        assert topic_config(admin, "mixed", "retention.ms")["value"] == "3600000", "sent back"
        for bad in (
            {"compression.type": "gzip"},
            # A topic's max.message.bytes is settable (librdkafka 0129); out of its range not.
            {"max.message.bytes": "-1"},
            {"message.format.version": "0.7.0"},
        ):
            assert "InvalidConfig" in alter(bad), bad
        assert topic_config(admin, "mixed", "retention.ms")["value"] == "3600000", "refused"
        # (kafka-python's AlterConfigs sends the topic's dynamic retention.ms back with it.)
        assert alter({"message.format.version": "0.10.0-IV1"}) == "OK"
        assert topic_config(admin, "mixed", "message.format.version")["value"] == "3.0-IV1"
        assert topic_config(admin, "mixed", "retention.ms")["value"] == "3600000"
        produce([b"after-%d" % i for i in range(3)])
        c = KafkaConsumer(
            bootstrap_servers=broker.kafka_bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=5_000,
        )
        c.assign([TopicPartition("mixed", 0)])
        values = []
        for m in c:
            values.append(m.value)
            if len(values) == 6:
                break
        c.close()
        assert values == [b"v2-%d" % i for i in range(3)] + [b"after-%d" % i for i in range(3)]
    finally:
        admin.close()
