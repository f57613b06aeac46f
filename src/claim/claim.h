/*-------------------------------------------------------------------------
 *
 * claim.h
 *	  The kit of the claims' SQL entry points (entry.c): the argument checks
 *	  that every entry point taking a consumer and a key (a message id, a
 *	  stream) shares, a batch argument and its answer, the checks before a
 *	  claim and the frame that counts its outcomes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CLAIM_H
#define DEDUP_CLAIM_H

#include "fmgr.h"
#include "utils/array.h"

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

#endif							/* DEDUP_CLAIM_H */
