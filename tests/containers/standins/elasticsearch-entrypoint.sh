#!/bin/sh
# One Elasticsearch node on 0.0.0.0:9200 with its data in /usr/share/elasticsearch/data.
set -eu
home=/usr/share/elasticsearch
version=$(ls "$home"/modules/transport-netty4/transport-netty4-*.jar | sed 's/.*transport-netty4-\(.*\)\.jar/\1/')
cat >"$home/modules/transport-netty4/plugin-descriptor.properties" <<DESC
description=Netty 4 based transport implementation
version=$version
name=transport-netty4
classname=org.elasticsearch.transport.netty4.Netty4Plugin
java.version=17
elasticsearch.version=$version
extended.plugins=
has.native.controller=false
modulename=org.elasticsearch.transport.netty4
DESC
# shellcheck disable=SC2086
exec java $ES_JAVA_OPTS -XX:+UseSerialGC -Djava.awt.headless=true -Dlog4j2.disable.jmx=true \
    --module-path "$(ls /opt/es/lib/*.jar | paste -sd:)" --add-modules ALL-MODULE-PATH \
    -cp /opt/es/classes ElasticsearchNode "$home" 9200 9300 0.0.0.0
