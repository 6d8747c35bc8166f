"""Kafka topic admin APIs (kafka-port/src/admin) against the real binary with kafka-python's
KafkaAdminClient: CreateTopics, CreatePartitions, DeleteTopics, and the partition count
surviving a restart."""

import pytest

kafka = pytest.importorskip("kafka", reason="kafka-python is in scripts/lib/requirements.txt")
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewPartitions, NewTopic  # noqa: E402
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
