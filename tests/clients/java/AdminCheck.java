// Drives a sidecar with the official Pulsar Java admin client (issue 13, item 6):
// tenant -> namespace -> partitioned topic -> policies -> lookup -> delete, plus bad input.
// Usage: java -cp 'libs/*:classes' AdminCheck http://127.0.0.1:PORT TENANT
// Prints one "ok <step>" line per step; exits 1 with the failed step on the first error.

import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.TenantInfo;

public final class AdminCheck {
    private static void check(String step, boolean condition, Object detail) {
        if (!condition) {
            System.out.println("FAILED " + step + ": " + detail);
            System.exit(1);
        }
        System.out.println("ok " + step);
    }

    private interface Call {
        void run() throws Exception;
    }

    private static void refused(String step, Class<? extends PulsarAdminException> expected, Call call)
            throws Exception {
        try {
            call.run();
        } catch (PulsarAdminException e) {
            check(step, expected.isInstance(e), e.getClass().getSimpleName() + ": " + e.getMessage());
            return;
        }
        check(step, false, "no exception");
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String tenant = args[1];
        String ns = tenant + "/ns";
        String topic = "persistent://" + ns + "/orders";
        String plain = "persistent://" + ns + "/plain";
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(url).build()) {
            check("clusters", admin.clusters().getClusters().contains("standalone"),
                    admin.clusters().getClusters());
            check("cluster", admin.clusters().getCluster("standalone").getServiceUrl() != null, "");
            check("brokers", !admin.brokers().getActiveBrokers().isEmpty(), "");
            refused("namespace without tenant", PulsarAdminException.NotFoundException.class,
                    () -> admin.namespaces().createNamespace(ns, 4));
            admin.tenants().createTenant(tenant, TenantInfo.builder()
                    .allowedClusters(Set.of("standalone")).adminRoles(Set.of()).build());
            check("tenant", admin.tenants().getTenants().contains(tenant), admin.tenants().getTenants());
            refused("tenant again", PulsarAdminException.ConflictException.class,
                    () -> admin.tenants().createTenant(tenant, TenantInfo.builder()
                            .allowedClusters(Set.of("standalone")).build()));
            admin.namespaces().createNamespace(ns, 4);
            check("namespace", admin.namespaces().getNamespaces(tenant).equals(List.of(ns)),
                    admin.namespaces().getNamespaces(tenant));
            check("bundles", admin.namespaces().getBundles(ns).getNumBundles() == 4, "");
            admin.namespaces().setNamespaceMessageTTL(ns, 120);
            check("namespace messageTTL", admin.namespaces().getNamespaceMessageTTL(ns) == 120, "");
            // The properties form sends {"partitions", "properties"} as
            // application/vnd.partitioned-topic-metadata+json.
            admin.topics().createPartitionedTopic(topic, 3, Map.of("owner", "java"));
            check("partitions", admin.topics().getPartitionedTopicMetadata(topic).partitions == 3, "");
            admin.topics().updatePartitionedTopic(topic, 4);
            check("more partitions",
                    admin.topics().getPartitionedTopicMetadata(topic).partitions == 4, "");
            refused("fewer partitions", PulsarAdminException.class,
                    () -> admin.topics().updatePartitionedTopic(topic, 2));
            check("partitioned list", admin.topics().getPartitionedTopicList(ns).equals(List.of(topic)),
                    admin.topics().getPartitionedTopicList(ns));
            admin.topics().createNonPartitionedTopic(plain);
            check("topic list", admin.topics().getList(ns).contains(plain), admin.topics().getList(ns));
            // Topic policies.
            check("unset maxConsumers", admin.topicPolicies().getMaxConsumers(topic) == null, "");
            check("applied maxConsumers",
                    Integer.valueOf(0).equals(admin.topicPolicies().getMaxConsumers(topic, true)), "");
            check("applied messageTTL (namespace)",
                    Integer.valueOf(120).equals(admin.topicPolicies().getMessageTTL(topic, true)), "");
            admin.topicPolicies().setMaxConsumers(topic, 5);
            check("maxConsumers", Integer.valueOf(5).equals(admin.topicPolicies().getMaxConsumers(topic)),
                    admin.topicPolicies().getMaxConsumers(topic));
            admin.topicPolicies().setMessageTTL(topic, 60);
            check("messageTTL", Integer.valueOf(60).equals(admin.topicPolicies().getMessageTTL(topic)), "");
            admin.topicPolicies().setRetention(topic, new RetentionPolicies(60, 100));
            RetentionPolicies retention = admin.topicPolicies().getRetention(topic);
            check("retention", retention.getRetentionTimeInMinutes() == 60
                    && retention.getRetentionSizeInMB() == 100, retention);
            admin.topicPolicies().setBacklogQuota(topic, BacklogQuota.builder().limitSize(1000)
                    .limitTime(-1).retentionPolicy(BacklogQuota.RetentionPolicy.producer_request_hold)
                    .build(), BacklogQuota.BacklogQuotaType.destination_storage);
            Map<BacklogQuota.BacklogQuotaType, BacklogQuota> quotas =
                    admin.topicPolicies().getBacklogQuotaMap(topic);
            check("backlogQuota",
                    quotas.get(BacklogQuota.BacklogQuotaType.destination_storage).getLimitSize() == 1000,
                    quotas);
            admin.topicPolicies(true).setMaxProducers(topic, 3);
            check("global maxProducers",
                    Integer.valueOf(3).equals(admin.topicPolicies(true).getMaxProducers(topic)), "");
            refused("negative maxConsumers", PulsarAdminException.PreconditionFailedException.class,
                    () -> admin.topicPolicies().setMaxConsumers(topic, -1));
            refused("bad quorums", PulsarAdminException.class,
                    () -> admin.topicPolicies().setPersistence(topic,
                            new org.apache.pulsar.common.policies.data.PersistencePolicies(1, 2, 3, 0.0)));
            refused("policy of a partition", PulsarAdminException.PreconditionFailedException.class,
                    () -> admin.topicPolicies().getMaxConsumers(topic + "-partition-0"));
            refused("policy of a missing topic", PulsarAdminException.NotFoundException.class,
                    () -> admin.topicPolicies().getMaxConsumers("persistent://" + ns + "/missing"));
            admin.topicPolicies().removeMaxConsumers(topic);
            check("removed maxConsumers", admin.topicPolicies().getMaxConsumers(topic) == null, "");
            // Lookup.
            String broker = admin.lookups().lookupTopic(plain);
            check("lookup", broker.startsWith("pulsar://"), broker);
            // Delete everything again.
            refused("non-empty namespace", PulsarAdminException.ConflictException.class,
                    () -> admin.namespaces().deleteNamespace(ns));
            admin.topics().deletePartitionedTopic(topic);
            admin.topics().delete(plain);
            check("topics deleted", admin.topics().getList(ns).isEmpty(), admin.topics().getList(ns));
            admin.namespaces().deleteNamespace(ns);
            admin.tenants().deleteTenant(tenant);
            check("tenant deleted", !admin.tenants().getTenants().contains(tenant), "");
        }
        System.out.println("ALL OK");
    }
}
