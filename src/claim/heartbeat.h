/*-------------------------------------------------------------------------
 *
 * heartbeat.h
 *	  The claims' heartbeat (heartbeat.c): beaten by every call that writes
 *	  claims, taken by the sweeper to learn whether claims ran.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_HEARTBEAT_H
#define DEDUP_HEARTBEAT_H

/* shared memory: dedup.c's hooks */
extern void dedup_heartbeat_shmem_request(void);
extern void dedup_heartbeat_shmem_startup(void);

/* a call that writes claims (claim_writer.c) */
extern void dedup_claims_heartbeat(void);

/* the sweeper (sweep_pace.c) */
extern bool dedup_claims_heartbeat_take(void);

#endif							/* DEDUP_HEARTBEAT_H */
