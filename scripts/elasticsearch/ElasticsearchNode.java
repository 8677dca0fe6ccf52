import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;

import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.node.Node;

/**
 * Runs one real Elasticsearch node in this JVM on loopback.
 *
 * The server jar and the transport-netty4 module come from Maven Central; the module is laid out
 * under HOME/modules exactly as in the official distribution, so the node loads it through its own
 * plugin loader. No x-pack and no ingest-geoip module are present: security is off and there is no
 * GeoIP downloader. SIGTERM runs the shutdown hook, which closes the node cleanly.
 *
 * Usage: ElasticsearchNode HOME HTTP_PORT TRANSPORT_PORT [NETWORK_HOST]
 * (NETWORK_HOST defaults to 127.0.0.1; a container passes 0.0.0.0.)
 */
public final class ElasticsearchNode {
    public static void main(String[] args) throws Exception {
        Path home = Path.of(args[0]).toAbsolutePath();
        Files.createDirectories(home.resolve("config"));
        Settings settings = Settings.builder()
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            .put("cluster.name", "ragkb-local")
            .put("node.name", "ragkb-node")
            .put("network.host", args.length > 3 ? args[3] : "127.0.0.1")
            .put("http.port", args[1])
            .put("transport.port", args[2])
            .put("discovery.type", "single-node")
            // a test node on a shared disk must keep accepting writes
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .put("action.auto_create_index", false)
            .build();
        LogConfigurator.setNodeName("ragkb-node");
        LogConfigurator.configureWithoutConfig(settings);
        Environment environment = new Environment(settings, home.resolve("config"));
        Node node = new Node(environment);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                stopped.countDown();
            }
        }));
        node.start();
        System.out.println("ragkb-elasticsearch-node started");
        stopped.await();
    }
}
