/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  The claims: the kit of their SQL entry points (entry.c) -- the
 *	  argument checks that every entry point taking a consumer and a key (a
 *	  message id, a stream) shares, a batch argument and its answer, the
 *	  checks before a claim and the frame that counts its outcomes --, who
 *	  may claim for a consumer (claimants.c), the claim itself, the
 *	  speculative insertion of ON CONFLICT (claim_writer.c), and the claims'
 *	  heartbeat (heartbeat.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CLAIM_H
#define DEDUP_CLAIM_H

#include "access/attnum.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/relcache.h"

#include "stats/claim_stats.h"

extern void dedup_check_not_null(const char *function, const char *argname,
								 int element, bool isnull);
extern void dedup_check_key(const char *function, const char *argname,
							int element, Datum value, bool isnull,
							Size max_bytes);

/* a batch argument, as dedup_batch_arg read it */
typedef struct DedupBatch
{
	ArrayType  *array;
	Datum	   *elements;
	bool	   *nulls;
	int			n;
} DedupBatch;

extern void dedup_batch_arg(FunctionCallInfo fcinfo, int argno,
							const char *function, const char *argname,
							Oid elemtype, DedupBatch *batch);
extern ArrayType *dedup_batch_answers(const DedupBatch *batch,
									  const bool *answers);

/* what dedup_claim_checks checks */
#define DEDUP_CHECK_WRITES		0x01	/* not in recovery, not read-only */
#define DEDUP_CHECK_CLAIMANT	0x02	/* dedup_consumer_roles */

/*
 * A claim that answered true, as the observer hears of it: a single
 * message id, a single offset (stream, partition, offset), or neither (a
 * batch of more than one, or a routed claim: no single incoming message)
 */
typedef struct DedupClaimOrigin
{
	text	   *consumer;
	text	   *message_id;		/* a claim of one message id, or NULL */
	text	   *stream;			/* a claim of one offset, or NULL */
	int32		partition;
	int64		offset;
} DedupClaimOrigin;

/*
 * claim.c: who hears of each claim that answers true (the outbox, which
 * derives the ids of the transaction's messages from it), set by _PG_init;
 * every kind of claim tells it through dedup_claim_observed
 */
typedef void (*DedupClaimObserver) (const DedupClaimOrigin *origin);
extern void dedup_observe_claims(DedupClaimObserver observer);
extern void dedup_claim_observed(const DedupClaimOrigin *origin);

extern void dedup_claim_checks(const char *call, text *consumer, int checks);

/* the outcomes of one call's claims, counted once */
typedef struct DedupClaimFrame
{
	MemoryContext caller_context;
	text	   *consumer;
	text	   *stream;			/* counted for the stream too, or NULL */
	DedupClaimTally tally;
} DedupClaimFrame;

extern void dedup_claim_frame_start(DedupClaimFrame *frame, text *consumer,
									text *stream);
extern void dedup_claim_failed(DedupClaimFrame *frame, bool waited,
							   const instr_time *start);
extern void dedup_claim_counted(DedupClaimFrame *frame);

/* who may claim for a consumer (claimants.c) */
extern void dedup_check_claimant(text *consumer, const char *function);

/* the claim itself (claim_writer.c) */
/* What a claim of one key found; the order of dedup_claim_status's labels */
typedef enum ClaimOutcome
{
	CLAIM_CLAIMED,				/* recorded now */
	CLAIM_DUPLICATE,			/* recorded before */
	CLAIM_IN_PROGRESS			/* another open transaction is at it */
} ClaimOutcome;

typedef struct ClaimWriter ClaimWriter;

/*
 * ON CONFLICT DO UPDATE's WHERE: whether to replace existing, the locked
 * row with the key of the new one, by the new one; arg is the caller's.
 */
typedef bool (*ClaimUpdateTest) (TupleTableSlot *existing, void *arg);

extern ClaimWriter *dedup_claim_writer_begin(Relation rel, Oid key_index,
											 AttrNumber fingerprint_attnum,
											 bool key_target);
extern ClaimOutcome dedup_claim_writer_insert(ClaimWriter *writer,
											  Datum consumer,
											  Datum message_id,
											  Datum fingerprint,
											  bool has_fingerprint,
											  bool wait);
extern bool dedup_claim_writer_upsert(ClaimWriter *writer,
									  const Datum *values, int nvalues,
									  ClaimUpdateTest test, void *arg);
extern ClaimOutcome dedup_claim_writer_insert_row(ClaimWriter *writer,
												  const Datum *values,
												  const bool *nulls,
												  int nvalues);
extern void dedup_claim_writer_end(ClaimWriter *writer);

/* the claims' heartbeat (heartbeat.c) */
/* shared memory: dedup.c's hooks */
extern void dedup_heartbeat_shmem_request(void);
extern void dedup_heartbeat_shmem_startup(void);

/* a call that writes claims (claim_writer.c) */
extern void dedup_claims_heartbeat(void);

/* the sweeper (sweep_pace.c) */
extern bool dedup_claims_heartbeat_take(void);

#endif							/* DEDUP_CLAIM_H */
