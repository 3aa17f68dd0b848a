# Builds every service from this repository with the Maven wrapper, then runs it as a non-root user.
FROM eclipse-temurin:17-jdk AS build
WORKDIR /src
# The poms alone bought no layer cache (no dependency step could use them: the modules depend on
# each other's builds); a BuildKit cache mount keeps the Maven repository between builds instead.
# docker/maven-cache.Dockerfile fills it from a local ~/.m2, so that a build downloads nothing (CI).
# No "# syntax=" line: that makes BuildKit pull its Dockerfile front end from Docker Hub, and the
# engine's own supports everything here.
COPY . .
RUN --mount=type=cache,target=/root/.m2 ./mvnw -B -q --no-transfer-progress -pl dispatcher,relay,consumer,cli -am package -DskipTests -DskipAnalysis

FROM eclipse-temurin:17-jre
RUN groupadd --system app && useradd --system --gid app --home-dir /app --shell /usr/sbin/nologin app \
    && mkdir /keys && chown app:app /keys
WORKDIR /app
COPY --from=build /src/dispatcher/target/fenced-jobs-dispatcher.jar /src/relay/target/fenced-jobs-relay.jar \
     /src/consumer/target/fenced-jobs-consumer.jar /src/cli/target/fenced-jobs.jar /app/
USER app
ENV JAVA_TOOL_OPTIONS="-XX:MaxRAMPercentage=75"
# Each compose service picks its jar: dispatcher, relay, consumer, or the CLI (migrate, status, ...).
ENTRYPOINT ["java", "-jar"]
CMD ["/app/fenced-jobs.jar", "--help"]
