// Drives a sidecar with the Go pulsaradmin library (what pulsarctl is built on), issue 13
// item 6: tenant -> namespace -> partitioned topic -> policies -> lookup -> delete.
// Usage: admincheck http://127.0.0.1:PORT TENANT
// Prints one "ok <step>" line per step; exits 1 with the failed step on the first error.
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"
)

func check(step string, ok bool, detail any) {
	if !ok {
		fmt.Printf("FAILED %s: %v\n", step, detail)
		os.Exit(1)
	}
	fmt.Printf("ok %s\n", step)
}

func must(step string, err error) {
	check(step, err == nil, err)
}

func main() {
	url, tenant := os.Args[1], os.Args[2]
	ns := tenant + "/ns"
	admin, err := pulsaradmin.NewClient(&pulsaradmin.Config{WebServiceURL: url})
	must("client", err)

	clusters, err := admin.Clusters().List()
	check("clusters", err == nil && slices.Contains(clusters, "standalone"), clusters)
	brokers, err := admin.Brokers().GetActiveBrokers("standalone")
	check("brokers", err == nil && len(brokers) > 0, err)

	check("namespace without tenant", admin.Namespaces().CreateNamespace(ns) != nil, "accepted")
	must("tenant", admin.Tenants().Create(utils.TenantData{
		Name: tenant, AllowedClusters: []string{"standalone"}, AdminRoles: []string{},
	}))
	tenants, err := admin.Tenants().List()
	check("tenant listed", err == nil && slices.Contains(tenants, tenant), tenants)
	must("namespace", admin.Namespaces().CreateNamespace(ns))
	namespaces, err := admin.Namespaces().GetNamespaces(tenant)
	check("namespace listed", err == nil && slices.Equal(namespaces, []string{ns}), namespaces)
	must("namespace messageTTL", admin.Namespaces().SetNamespaceMessageTTL(ns, 120))
	ttl, err := admin.Namespaces().GetNamespaceMessageTTL(ns)
	check("namespace messageTTL read", err == nil && ttl == 120, ttl)

	topic, err := utils.GetTopicName("persistent://" + ns + "/orders")
	must("topic name", err)
	// Create sends {"partitions": 4, "properties": …} as
	// application/vnd.partitioned-topic-metadata+json.
	must("partitioned topic", admin.Topics().Create(*topic, 4))
	meta, err := admin.Topics().GetMetadata(*topic)
	check("partitions", err == nil && meta.Partitions == 4, meta)
	must("more partitions", admin.Topics().Update(*topic, 6))
	meta, err = admin.Topics().GetMetadata(*topic)
	check("partitions after update", err == nil && meta.Partitions == 6, meta)
	check("fewer partitions refused", admin.Topics().Update(*topic, 2) != nil, "accepted")
	nsName, err := utils.GetNameSpaceName(tenant, "ns")
	must("namespace name", err)
	partitioned, plain, err := admin.Topics().List(*nsName)
	check("topic list", err == nil && slices.Equal(partitioned, []string{topic.String()}),
		fmt.Sprint(partitioned, plain, err))

	must("set maxConsumers", admin.Topics().SetMaxConsumers(*topic, 5))
	maxConsumers, err := admin.Topics().GetMaxConsumers(*topic)
	check("maxConsumers", err == nil && maxConsumers == 5, fmt.Sprint(maxConsumers, err))
	check("negative maxConsumers refused", admin.Topics().SetMaxConsumers(*topic, -1) != nil,
		"accepted")
	must("set retention", admin.Topics().SetRetention(*topic, utils.NewRetentionPolicies(60, 100)))
	retention, err := admin.Topics().GetRetention(*topic, false)
	check("retention", err == nil && retention.RetentionTimeInMinutes == 60 &&
		retention.RetentionSizeInMB == 100, fmt.Sprint(retention, err))
	// Unset: Pulsar answers 200 with no body, which this library reads as -1.
	unset, err := admin.Topics().GetMessageTTL(*topic)
	check("messageTTL unset", err == nil && unset == -1, fmt.Sprint(unset, err))
	partition, err := utils.GetTopicName(topic.String() + "-partition-0")
	must("partition name", err)
	check("policy of a partition refused", admin.Topics().SetMaxConsumers(*partition, 1) != nil,
		"accepted")

	lookup, err := admin.Topics().Lookup(*partition)
	check("lookup", err == nil && strings.HasPrefix(lookup.BrokerURL, "pulsar://"),
		fmt.Sprint(lookup, err))

	check("non-empty namespace refused", admin.Namespaces().DeleteNamespace(ns) != nil, "accepted")
	must("delete topic", admin.Topics().Delete(*topic, false, false))
	must("delete namespace", admin.Namespaces().DeleteNamespace(ns))
	must("delete tenant", admin.Tenants().Delete(tenant))
	tenants, err = admin.Tenants().List()
	check("tenant gone", err == nil && !slices.Contains(tenants, tenant), tenants)
	fmt.Println("ALL OK")
}
