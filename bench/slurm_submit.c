/* A long-running Slurm client for bench/compare_slurm.sh: submits batch jobs with
 * libslurm's slurm_submit_batch_job, one RPC a job, no process per job (sbatch
 * costs ~5 ms of client CPU a process, which would measure the client, not the
 * controller).
 *
 *   cc -O2 -o slurm_submit bench/slurm_submit.c -lslurm
 *
 *   slurm_submit rate  PARTITION FROM UNTIL LATFILE  closed loop until UNTIL (epoch
 *        seconds); submissions from FROM on are counted: prints "ok ERR cpu_s" and
 *        writes one latency (µs) a line to LATFILE
 *   slurm_submit batch PARTITION N                   N jobs back to back; prints
 *        "ok err seconds"
 *   slurm_submit idle  PARTITION N DIR GAP_S         N jobs one at a time, each
 *        writing its start time to DIR/<jobid>.start; waits for that file and
 *        GAP_S more before the next; prints "jobid submit_epoch" a job
 *
 * Every job asks for one GPU (gres gpu:1) and one CPU, and runs `true`
 * (idle mode: `date +%s.%N > DIR/$SLURM_JOB_ID.start`). SLURM_CONF names the
 * cluster. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu_seconds(void) {
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

static char *env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};

static void describe(job_desc_msg_t *desc, char *partition, char *script) {
	slurm_init_job_desc_msg(desc);
	desc->name = "bench";
	desc->partition = partition;
	desc->script = script;
	desc->environment = env;
	desc->env_size = 1;
	desc->std_out = "/dev/null";
	desc->std_err = "/dev/null";
	desc->work_dir = "/tmp";
	desc->user_id = getuid();
	desc->group_id = getgid();
	desc->min_nodes = 1;
	desc->max_nodes = 1;
	desc->num_tasks = 1;
	desc->min_cpus = 1;
	desc->tres_per_node = "gres:gpu:1";
}

/* One submission: the job id, or 0 on an error (counted by the caller). */
static uint32_t submit(job_desc_msg_t *desc) {
	submit_response_msg_t *resp = NULL;
	uint32_t id = 0;
	if (slurm_submit_batch_job(desc, &resp) == SLURM_SUCCESS && resp)
		id = resp->job_id;
	else if (getenv("SLURM_SUBMIT_VERBOSE"))
		fprintf(stderr, "submit: %s\n", slurm_strerror(errno));
	if (resp)
		slurm_free_submit_response_response_msg(resp);
	return id;
}

int main(int argc, char **argv) {
	job_desc_msg_t desc;
	if (argc < 3) {
		fprintf(stderr, "usage: see the comment at the top of slurm_submit.c\n");
		return 2;
	}
	slurm_init(NULL);
	char *mode = argv[1], *partition = argv[2];
	char script_true[] = "#!/bin/sh\ntrue\n";

	if (!strcmp(mode, "rate") && argc == 6) {
		double from = atof(argv[3]), until = atof(argv[4]);
		FILE *lat = fopen(argv[5], "w");
		if (!lat) {
			perror(argv[5]);
			return 1;
		}
		describe(&desc, partition, script_true);
		long ok = 0, err = 0;
		double cpu0 = -1, t;
		while ((t = now()) < until) {
			if (cpu0 < 0 && t >= from)
				cpu0 = cpu_seconds();
			uint32_t id = submit(&desc);
			double done = now();
			if (t >= from) {
				if (id) {
					ok++;
					fprintf(lat, "%ld\n", (long)((done - t) * 1e6));
				} else {
					err++;
				}
			}
		}
		fclose(lat);
		printf("%ld %ld %.6f\n", ok, err, cpu0 < 0 ? 0.0 : cpu_seconds() - cpu0);
	} else if (!strcmp(mode, "batch") && argc == 4) {
		long n = atol(argv[3]), ok = 0, err = 0;
		describe(&desc, partition, script_true);
		double t0 = now();
		for (long i = 0; i < n; i++) {
			if (submit(&desc))
				ok++;
			else
				err++;
		}
		printf("%ld %ld %.6f\n", ok, err, now() - t0);
	} else if (!strcmp(mode, "idle") && argc == 6) {
		long n = atol(argv[3]);
		char *dir = argv[4];
		double gap = atof(argv[5]);
		char script[4096], path[4200];
		snprintf(script, sizeof script, "#!/bin/sh\ndate +%%s.%%N > %s/$SLURM_JOB_ID.start\n", dir);
		describe(&desc, partition, script);
		for (long i = 0; i < n; i++) {
			double t = now();
			uint32_t id = submit(&desc);
			if (!id) {
				printf("0 %.6f\n", t);
				continue;
			}
			printf("%u %.6f\n", id, t);
			fflush(stdout);
			snprintf(path, sizeof path, "%s/%u.start", dir, id);
			struct stat st;
			double give_up = now() + 60;
			while ((stat(path, &st) || st.st_size == 0) && now() < give_up)
				usleep(2000);
			usleep((useconds_t)(gap * 1e6));
		}
	} else {
		fprintf(stderr, "usage: see the comment at the top of slurm_submit.c\n");
		return 2;
	}
	slurm_fini();
	return 0;
}
